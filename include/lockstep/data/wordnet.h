// WordNet noun supersenses: a 4-way text classification task (animal, artifact, food, plant)
// from the synsets of data.noun.
//
// Contract: each synset whose lex_filenum is 05 (noun.animal), 06 (noun.artifact), 13
// (noun.food) or 20 (noun.plant) becomes one example, classes 0..3 in that order, in file order.
// Its text is "<first word>: <gloss>" (the synset's first word with '_' as spaces, then the gloss
// after the first '|', trimmed), e.g. "dog: a member of the genus Canis ...": the word is part of
// what the synset says and glosses alone are often elliptic ("any of various ..."). The text's
// ids are cut to seq_len or padded with the tokenizer's pad id (no eos); label_width is 1.
// Split: a synset is in the test split when wordnet_is_test_offset(offset), a fixed hash of its
// offset (about 10%), so the split never depends on the file's order or on other synsets.
// Every line is checked against the data.noun grammar; problems throw ls::Error naming the file
// and line. Pure functions, safe to call from many threads.
//
// Data: wordnet-base (Debian package), WordNet 3.0 under the WordNet licence (permissive; keep
// its notice, at the top of data.noun). Counts there: animal 7509, artifact 11587, food 2573,
// plant 8030 (29,699; artifact, the majority, is 0.39).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <lockstep/data/dataset.h>
#include <lockstep/data/tokenizer.h>

namespace ls::data {

inline constexpr const char* kWordnetNounPath = "/usr/share/wordnet/data.noun";
inline constexpr int kSupersenseClasses = 4;
inline constexpr std::array<int, kSupersenseClasses> kSupersenseLexFiles = {5, 6, 13, 20};
inline constexpr std::array<std::string_view, kSupersenseClasses> kSupersenseNames = {
    "animal", "artifact", "food", "plant"};

// True for the synsets of the test split: splitmix64(offset) % 10 == 0.
bool wordnet_is_test_offset(int64_t offset);

// The examples of one split, named "wordnet-supersenses-train" / "-test".
Dataset load_wordnet_supersenses(const Tokenizer& tokenizer, int64_t seq_len, Split split,
                                 const std::string& path = kWordnetNounPath);

// Examples per class (index = class) of a supersense Dataset (4 classes, one label each).
std::array<int64_t, kSupersenseClasses> supersense_counts(const Dataset& ds);

// "<name>: N examples: animal a, artifact b, food c, plant d; majority class 0.39", for logs.
std::string describe_supersense_counts(const Dataset& ds);

}  // namespace ls::data
