// ProgressBar (see progress.h).
#include "progress.h"

#include <unistd.h>

#include <cstdio>

ProgressBar::ProgressBar(bool shown) : shown_(shown), tty_(isatty(fileno(stderr)) == 1) {}

void ProgressBar::begin(std::string label, int64_t total) {
  label_ = std::move(label);
  total_ = total;
  last_draw_ = {};
  last_width_ = 0;
  if (shown_ && tty_) draw(0, "starting");
}

void ProgressBar::update(int64_t done, const std::string& status, bool milestone) {
  if (!shown_) return;
  if (!tty_) {
    if (milestone) {
      std::fprintf(stderr, "%s: step %lld/%lld %s\n", label_.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total_), status.c_str());
    }
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!milestone && done != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(done, status);
}

void ProgressBar::draw(int64_t done, const std::string& status) {
  constexpr int kWidth = 30;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string line = label_ + " [";
  line.append(static_cast<size_t>(filled), '#');
  line.append(static_cast<size_t>(kWidth - filled), '.');
  line += "] " + std::to_string(done) + "/" + std::to_string(total_) + " " + status;
  const size_t width = line.size();
  if (width < last_width_) line.append(last_width_ - width, ' ');  // erase the longer old line
  last_width_ = width;
  std::fprintf(stderr, "\r%s", line.c_str());
  std::fflush(stderr);
}

void ProgressBar::end(const std::string& summary) {
  if (!shown_) return;
  if (tty_) {
    draw(total_, summary);
    std::fprintf(stderr, "\n");
  } else {
    std::fprintf(stderr, "%s: done, %s\n", label_.c_str(), summary.c_str());
  }
  std::fflush(stderr);
}
