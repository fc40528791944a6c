// Language-model data: plain English text from the GCIDE dictionary and its packing into
// next-token examples.
//
// Contract: load_gcide_text returns one dictionary entry per line ('\n' only separates
// documents), cleaned as clean_gcide_text says; make_lm_dataset packs documents (the non-empty
// lines of its text, each followed by the tokenizer's eos) into a Dataset of token sequences
// whose labels are the next tokens. split_tail holds out the tail of a Dataset. All throw ls::Error
// naming the file or argument on a problem. Pure functions, safe to call from many threads.
//
// Data: dict-gcide (Debian package) installs the GNU Collaborative International Dictionary of
// English, GPL-licensed (see /usr/share/doc/dict-gcide/copyright), as a dictzip file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <lockstep/data/dataset.h>
#include <lockstep/data/tokenizer.h>

namespace ls::data {

inline constexpr const char* kGcidePath = "/usr/share/dictd/gcide.dict.dz";

// Cleans dictd-format GCIDE text (plain or already decompressed):
// - documents: an entry starts at a line beginning in column 0 with a `\pronunciation\`; lines
//   up to the next entry (indented definitions, quotations, notes) belong to it. Everything
//   before the first entry (the dictd 00-database-* header and the licence text) is dropped;
// - dropped: pronunciations `\Af*fect"\`, cross-reference braces `{}` (their words are kept),
//   markup tags `<...>`, source tags ([1913 Webster], [WordNet 1.5], [PJC], [RHUD], ...), bytes
//   outside printable ASCII (a handful in GCIDE);
// - entities: accented letters [=a] ['e] [i^] [.a] ["o] ... become the plain letter, ligatures
//   [ae] [oe] stay two letters, [imac] [aum] [eth] [thorn] ... a near ASCII spelling, Greek
//   letters [alpha] ... their names; other bracketed text ([Obs.], etymologies) is kept;
// - whitespace collapsed to single spaces, each entry trimmed; empty entries dropped.
std::string clean_gcide_text(std::string_view raw);

// Reads the dictzip (gzip) file with zlib and returns clean_gcide_text of it (about 32 MB).
std::string load_gcide_text(const std::string& path = kGcidePath);

// Tokens: the documents' ids, each document followed by eos, cut into consecutive windows of
// seq_len + 1 tokens that overlap by one: example k = stream[k*seq_len, (k+1)*seq_len) and its
// labels stream[k*seq_len + 1, (k+1)*seq_len + 1) (label_width = features = seq_len, classes =
// vocab_size). The stream's tail that does not fill an example is dropped; no padding.
// max_examples > 0 stops after that many examples (encoding only what they need).
Dataset make_lm_dataset(std::string_view text, const Tokenizer& tokenizer, int64_t seq_len,
                        const std::string& name, int64_t max_examples = 0);

struct DatasetSplit {
  Dataset train;       // the first count - held examples, named "<name>-train"
  Dataset validation;  // the last held = round(count * fraction) (>= 1), named "<name>-val"
};

// Deterministic hold-out: the last fraction of the examples, in order (0 < fraction < 1; both
// parts must be non-empty). For a packed text these are the end of the corpus.
DatasetSplit split_tail(const Dataset& ds, double fraction);

}  // namespace ls::data
