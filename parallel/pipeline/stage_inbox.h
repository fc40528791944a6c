// StageInbox: how pipeline stages hand each other tensors (internal to parallel/pipeline*).
//
// A sender enqueues the work producing a tensor on its stream, records an Event after it and
// posts {tensor, event} to the receiver's inbox under a key (what it is and which micro-batch).
// The receiver's thread takes the message, makes its own stream wait on the event, and copies
// the tensor to its device (see Note [Pipeline transfer lifetime] in
// parallel/pipeline/pipeline_stage.cpp). Posting never blocks, so a schedule in which every stage
// only waits for what a neighbour's earlier action produced cannot deadlock. take() is bounded: it
// ends with an ls::Error when the inbox is aborted or after `timeout` (kind timeout), naming what
// it waited for. Thread-safety: post(), take() and abort() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <lockstep/error.h>
#include <lockstep/stream.h>
#include <lockstep/tensor.h>

namespace ls {

struct StageMessage {
  Tensor tensor;                 // on the sender's device; the sender keeps it alive
  const Event* ready = nullptr;  // recorded after the work that produced `tensor`
};

class StageInbox {
 public:
  enum class Kind {
    kActivation,
    kGradient,
    kTiedGradient,
    kTiedCopied,
    kEvalActivation,
    kEvalCopied
  };
  struct Key {
    Kind kind;
    int index;  // micro-batch, or tied parameter
    int from;   // the sending stage
    auto operator<=>(const Key&) const = default;
  };

  void post(const Key& key, StageMessage message) {
    {
      std::lock_guard lock(mutex_);
      // A second message under a key not yet taken is a protocol bug (a reused key): say so,
      // rather than lose the first and time out later.
      LS_ASSERT(messages_.count(key) == 0, "stage inbox: a message of kind ",
                static_cast<int>(key.kind), " index ", key.index, " from stage ", key.from,
                " was posted twice");
      messages_[key] = std::move(message);
    }
    cv_.notify_all();
  }

  StageMessage take(const Key& key, std::chrono::milliseconds timeout, const std::string& what) {
    std::unique_lock lock(mutex_);
    const bool arrived =
        cv_.wait_for(lock, timeout, [&] { return aborted_ || messages_.count(key) != 0; });
    if (aborted_) LS_THROW_AS(ErrorKind::kAborted, "aborted while waiting for ", what);
    if (!arrived) {
      LS_THROW_AS(ErrorKind::kTimeout, "waited ", timeout.count(), " ms for ", what,
                  " and it never came");
    }
    auto it = messages_.find(key);
    StageMessage out = std::move(it->second);
    messages_.erase(it);
    return out;
  }

  void abort() {
    {
      std::lock_guard lock(mutex_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

  // Drops messages left over by a failed step (on the owner's thread, between steps).
  void clear() {
    std::lock_guard lock(mutex_);
    messages_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<Key, StageMessage> messages_;
  bool aborted_ = false;
};

}  // namespace ls
