// Running the plot script (see scale_plot.h).
#include "scale_plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

// Our code for "the interpreter could not be started".
constexpr int kNoInterpreter = 127;

std::string find_script() {
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "plot_scale.py");
    candidates.push_back(exe.parent_path() / ".." / "share" / "lockstep" / "plot_scale.py");
  }
#ifdef LOCKSTEP_SCALE_PLOT_SCRIPT
  candidates.emplace_back(LOCKSTEP_SCALE_PLOT_SCRIPT);
#endif
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// Runs argv[0] with `args`; returns its exit code, or kNoInterpreter when it cannot start.
// quiet: its stdout and stderr go to /dev/null.
int run_program(std::vector<std::string> args, bool quiet) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return kNoInterpreter;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return kNoInterpreter;
  }
  if (!WIFEXITED(status)) return 1;
  return WEXITSTATUS(status);
}

}  // namespace

bool draw_scale_plot(const std::string& json_path, const std::string& png_path, bool json_kept) {
  const std::string script = find_script();
  if (script.empty()) {
    std::fprintf(
        stderr,
        "lockstep-scale: warning: plot_scale.py not found (next to the executable, in "
        "../share/lockstep or the source tree); no plot drawn. The JSON has the results.\n");
    return false;
  }
  std::vector<std::string> pythons{"python3", "/usr/bin/python3"};
  if (const char* env = std::getenv("LOCKSTEP_PYTHON"); env != nullptr && *env != '\0') {
    pythons = {env};  // the user's choice, and only it
  }
  bool any_python = false;
  for (const std::string& python : pythons) {
    // Probe quietly first, so an interpreter without matplotlib says nothing.
    const int probe = run_program({python, "-c", "import matplotlib"}, /*quiet=*/true);
    if (probe == kNoInterpreter) continue;
    any_python = true;
    if (probe != 0) continue;
    const int rc = run_program({python, script, json_path, png_path}, /*quiet=*/false);
    if (rc == 0) return true;
    std::fprintf(stderr,
                 "lockstep-scale: warning: %s %s failed (exit %d); no plot drawn. The "
                 "JSON has the results.\n",
                 python.c_str(), script.c_str(), rc);
    return false;
  }
  std::string tried;
  for (const std::string& python : pythons) tried += (tried.empty() ? "" : ", ") + python;
  std::fprintf(stderr,
               "lockstep-scale: warning: no plot drawn: %s (tried %s). Install it with\n"
               "    sudo apt-get install -y python3-matplotlib   (Debian/Ubuntu)\n"
               "or  python3 -m pip install matplotlib\n",
               any_python ? "matplotlib is missing" : "no python3 found", tried.c_str());
  if (json_kept) {
    std::fprintf(stderr, "and draw it later with: python3 %s %s %s\n", script.c_str(),
                 json_path.c_str(), png_path.c_str());
  }
  return false;
}
