// ProcessGroup (see parallel/process_group.h).
#include "parallel/process_group.h"

#include <string>
#include <vector>

#include "parallel/step_common.h"

namespace ls {

ProcessGroup::ProcessGroup(const World* world, std::chrono::milliseconds timeout)
    : world_(world), timeout_(timeout) {
  if (several()) channel_ = std::make_unique<mpi::FailureChannel>();
}

std::string ProcessGroup::prefix() const {
  if (!several()) return "";
  return detail::concat("process ", world_->rank(), " of ", world_->size(), " on ",
                        world_->host_name(), ": ");
}

std::optional<mpi::FailureNotice> ProcessGroup::notice() {
  return channel_ ? channel_->notice() : std::nullopt;
}

void ProcessGroup::post(ErrorKind kind, const std::string& message) {
  if (channel_) channel_->post(kind, message);
}

std::vector<double> ProcessGroup::sum_over_processes(std::span<const double> mine, const char* what,
                                                     std::string& failure, ErrorKind& kind) {
  if (!several()) return {mine.begin(), mine.end()};
  const std::vector<double> all = failing_run(
      [&] { return mpi::allgather_doubles(mine, timeout_, what, channel()); }, failure, kind);
  std::vector<double> sums(mine.size(), 0.0);
  for (size_t i = 0; i < all.size(); ++i) sums[i % mine.size()] += all[i];
  return sums;
}

void ProcessGroup::raise_notice_if_any(std::string& failure, ErrorKind& kind) {
  if (std::optional<mpi::FailureNotice> n = notice()) {
    failure = n->message;
    kind = n->kind;
    LS_THROW_AS(kind, failure);
  }
}

std::string ProcessGroup::describe(const std::exception_ptr& error) {
  return describe_exception(error);
}
ErrorKind ProcessGroup::kind_of(const std::exception_ptr& error) { return error_kind_of(error); }

checkpoint::LoadedCheckpoint ProcessGroup::read_checkpoint(const std::string& dir,
                                                           std::string& failure, ErrorKind& kind) {
  checkpoint::LoadedCheckpoint loaded;
  std::exception_ptr read_error;
  try {
    loaded = checkpoint::load_checkpoint(dir);
  } catch (...) {
    read_error = std::current_exception();
  }
  if (several()) {
    const std::vector<int> failed = failing_run(
        [&] {
          return mpi::allgather_int(read_error ? 1 : 0, timeout_,
                                    "load: whether every process could read the checkpoint",
                                    channel());
        },
        failure, kind);
    for (size_t p = 0; p < failed.size() && !read_error; ++p) {
      LS_CHECK_AS(ErrorKind::kIo, failed[p] == 0, "load: process ", p,
                  " could not read the checkpoint ", dir,
                  " (its own error says why); every process reads it, so it must be on a file "
                  "system all of them see");
    }
  }
  if (read_error) std::rethrow_exception(read_error);
  return loaded;
}

std::string ProcessGroup::on_process_zero(const std::function<std::string()>& commit,
                                          const char* what, const std::string& who,
                                          std::string& failure, ErrorKind& kind) {
  if (!several()) return commit();
  // The outcome travels as one string: "0" + the result, or the error's kind (3 digits after a
  // '1') + its message.
  std::string outcome;
  if (world_->rank() == 0) {
    try {
      outcome = commit();
      outcome.insert(outcome.begin(), '0');
    } catch (...) {
      outcome = std::to_string(1000 + static_cast<int>(error_kind_of(std::current_exception()))) +
                describe_exception(std::current_exception());
    }
  }
  outcome =
      failing_run([&] { return mpi::broadcast_string(outcome, 0, timeout_, what, channel_.get()); },
                  failure, kind);
  if (outcome.front() == '0') return outcome.substr(1);
  const auto commit_kind = static_cast<ErrorKind>(std::stoi(outcome.substr(0, 4)) - 1000);
  LS_THROW_AS(commit_kind, world_->rank() == 0 ? std::string() : who, outcome.substr(4));
}

}  // namespace ls
