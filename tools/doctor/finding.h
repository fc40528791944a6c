// What lockstep-doctor found: one Finding per check and subject, with a verdict, what was seen,
// and for a problem the likely cause and the fix. Every check of the doctor returns Findings;
// main.cpp prints them as a table (one verdict line each) or as JSON, and exits 1 when any is
// a FAIL.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ls::doctor {

enum class Verdict {
  kOk,             // checked, fine
  kWarn,           // works, but slower or riskier than it should be
  kFail,           // will hang, crash or be wrong: fix before training
  kNotApplicable,  // the check does not apply here (no GPU, not readable without root, ...)
};

const char* verdict_name(Verdict verdict);  // "OK", "WARN", "FAIL", "N/A"

struct Finding {
  std::string check;    // which check: "pcie-link", "acs", "iommu", "p2p", "power", ...
  std::string subject;  // what it is about: "cuda:0", "0000:16:02.0", "cuda:0<->cuda:1", "host"
  Verdict verdict = Verdict::kOk;
  std::string detail;  // what was seen, e.g. "x8 at 16 GT/s, capable of x16 at 32 GT/s"
  std::string fix;     // for WARN/FAIL: what to change, and where the advice comes from
};

using Findings = std::vector<Finding>;

// One line per finding: "OK    pcie-link  cuda:0  x16 at 32 GT/s", and for a WARN/FAIL a
// second, indented "fix: ..." line.
std::string findings_table(const Findings& findings);
// {"verdict": "FAIL", "findings": [{"check", "subject", "verdict", "detail", "fix"}...]}
std::string findings_json(const Findings& findings);
// The worst verdict (N/A counts as OK).
Verdict overall_verdict(const Findings& findings);

// A byte count as findings write it: "31.2 GiB".
std::string gib_text(int64_t bytes);

}  // namespace ls::doctor
