// ProcessGroup (see parallel/runtime/process_group.h).
#include "parallel/runtime/process_group.h"

#include <string>
#include <vector>

#include "parallel/runtime/step_common.h"

namespace ls {

ProcessGroup::ProcessGroup(const World* world, std::chrono::milliseconds timeout,
                           RunFailure& failure)
    : world_(world), timeout_(timeout), failure_(failure) {
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

void ProcessGroup::fail(ErrorKind kind, std::string message) {
  failure_ = {std::move(message), kind};
  if (channel_) channel_->post(failure_.kind, failure_.message);
  LS_THROW_AS(failure_.kind, failure_.message);
}

void ProcessGroup::record(const std::exception_ptr& error) {
  failure_ = {describe_exception(error), error_kind_of(error)};
  if (channel_) channel_->post(failure_.kind, failure_.message);
}

std::vector<double> ProcessGroup::sum_over_processes(std::span<const double> mine,
                                                     const char* what) {
  if (!several()) return {mine.begin(), mine.end()};
  const std::vector<double> all =
      failing_run([&] { return mpi::allgather_doubles(mine, timeout_, what, channel()); });
  std::vector<double> sums(mine.size(), 0.0);
  for (size_t i = 0; i < all.size(); ++i) sums[i % mine.size()] += all[i];
  return sums;
}

void ProcessGroup::raise_notice_if_any() {
  if (std::optional<mpi::FailureNotice> n = notice()) {
    failure_ = {n->message, n->kind};
    LS_THROW_AS(failure_.kind, failure_.message);
  }
}

checkpoint::LoadedCheckpoint ProcessGroup::read_checkpoint(const std::string& dir) {
  checkpoint::LoadedCheckpoint loaded;
  std::exception_ptr read_error;
  try {
    loaded = checkpoint::load_checkpoint(dir);
  } catch (...) {
    read_error = std::current_exception();
  }
  if (several()) {
    const std::vector<int> failed = failing_run([&] {
      return mpi::allgather_int(read_error ? 1 : 0, timeout_,
                                "load: whether every process could read the checkpoint", channel());
    });
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
                                          const char* what, const std::string& who) {
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
  outcome = failing_run(
      [&] { return mpi::broadcast_string(outcome, 0, timeout_, what, channel_.get()); });
  if (outcome.front() == '0') return outcome.substr(1);
  const auto commit_kind = static_cast<ErrorKind>(std::stoi(outcome.substr(0, 4)) - 1000);
  LS_THROW_AS(commit_kind, world_->rank() == 0 ? std::string() : who, outcome.substr(4));
}

}  // namespace ls
