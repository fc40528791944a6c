// Printing lockstep-doctor's findings (see finding.h).
#include "tools/doctor/finding.h"

#include <algorithm>
#include <cstdio>

#include <lockstep/json.h>

namespace ls::doctor {

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk: return "OK";
    case Verdict::kWarn: return "WARN";
    case Verdict::kFail: return "FAIL";
    case Verdict::kNotApplicable: return "N/A";
  }
  return "?";
}

std::string findings_table(const Findings& findings) {
  size_t check_width = 5, subject_width = 7;
  for (const Finding& f : findings) {
    check_width = std::max(check_width, f.check.size());
    subject_width = std::max(subject_width, f.subject.size());
  }
  std::string out;
  char line[64];
  for (const Finding& f : findings) {
    std::snprintf(line, sizeof line, "%-5s ", verdict_name(f.verdict));
    out += line;
    out += f.check + std::string(check_width - f.check.size() + 2, ' ');
    out += f.subject + std::string(subject_width - f.subject.size() + 2, ' ');
    out += f.detail + "\n";
    const bool problem = f.verdict == Verdict::kWarn || f.verdict == Verdict::kFail;
    if (problem && !f.fix.empty()) out += "      fix: " + f.fix + "\n";
  }
  return out;
}

std::string gib_text(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
  return text;
}

Verdict overall_verdict(const Findings& findings) {
  Verdict worst = Verdict::kOk;
  for (const Finding& f : findings) {
    if (f.verdict == Verdict::kFail) return Verdict::kFail;
    if (f.verdict == Verdict::kWarn) worst = Verdict::kWarn;
  }
  return worst;
}

std::string findings_json(const Findings& findings) {
  JsonWriter json;
  json.begin_object();
  json.field("verdict", verdict_name(overall_verdict(findings)));
  json.key("findings").begin_array();
  for (const Finding& f : findings) {
    json.begin_object();
    json.field("check", f.check).field("subject", f.subject);
    json.field("verdict", verdict_name(f.verdict));
    json.field("detail", f.detail).field("fix", f.fix);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.str() + "\n";
}

}  // namespace ls::doctor
