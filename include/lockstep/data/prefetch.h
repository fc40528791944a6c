// Prefetcher: a BatchIterator run on a background thread that keeps up to `depth` batches ready.
//
// Contract: next() hands out exactly the batches a BatchIterator over the same data set, sampler
// and batch size returns, bitwise and in order, epoch after epoch: it returns false once at the
// end of each epoch, and the next call continues with epoch + 1 (the producer has already moved
// the sampler on and prefetched it, so unlike BatchIterator there is no set_epoch/reset to do).
// epoch() and position() say where the consumer is (save them in a checkpoint); seek(epoch,
// index) continues from there, discarding what was prefetched. An exception on the producer
// thread (e.g. from gather_batch) is re-thrown by next() after the batches made before it, and
// by every later next() until seek(). The destructor stops the producer and joins it, waiting at
// most for the batch being gathered. Threads: one consumer thread calls next/seek; the Sampler
// belongs to the Prefetcher while it lives (do not call set_epoch on it); the Dataset must
// outlive it and not change.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <lockstep/data/sampler.h>

namespace ls::data {

struct PrefetchOptions {
  int depth = 2;  // batches kept ready (>= 1); an epoch's end counts as one
  // Called on the producer thread before batch `index` of `epoch` is gathered (index ==
  // batches_per_epoch for the epoch's end): a hook for tests and instrumentation. It may throw;
  // next() re-throws that.
  std::function<void(int64_t epoch, int64_t index)> on_produce;
  // Called on the producer thread after batch `index` of `epoch` is gathered, with when the
  // gathering began and ended (steady_now_ns(), lockstep/clock.h): a hook for traces
  // (Trainer::trace_span). It may throw; next() re-throws that.
  std::function<void(int64_t epoch, int64_t index, int64_t begin_ns, int64_t end_ns)> on_gathered;
};

class Prefetcher {
 public:
  // Starts prefetching at batch 0 of the sampler's current epoch.
  Prefetcher(const Dataset& ds, Sampler& sampler, int64_t batch_size, bool drop_last = true,
             PrefetchOptions options = {});
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Swaps the next batch into out (out's old vectors are reused by the producer); false at the
  // end of the epoch, after which epoch() is one more and position() 0.
  bool next(Batch& out);
  // Continue from batch `index` of `epoch` (as BatchIterator::seek; same checks and messages).
  void seek(int64_t epoch, int64_t index);
  int64_t epoch() const { return epoch_; }
  // The number of batches next() has returned in the current epoch (the next batch's index).
  int64_t position() const { return position_; }
  int64_t batches_per_epoch() const { return iterator_.batches_per_epoch(); }
  // How many next() calls found nothing ready and had to wait for the producer.
  int64_t waits() const { return waits_; }
  // Batches gathered and waiting for next() (an epoch's end counts as one); any thread.
  int64_t ready() const;

 private:
  struct Item {
    Batch batch;
    bool end_of_epoch = false;
  };
  void produce();

  Sampler& sampler_;
  BatchIterator iterator_;  // used by the producer thread only (or while it is paused)
  PrefetchOptions options_;
  int64_t epoch_ = 0;     // consumer side
  int64_t position_ = 0;  // consumer side
  int64_t waits_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable producer_cv_;  // room in ready_, resumed, or stop
  std::condition_variable consumer_cv_;  // an item, an error, or the producer went idle
  std::deque<Item> ready_;
  std::vector<Batch> spare_;  // batches handed back by next(), reused to avoid allocation
  std::exception_ptr error_;
  bool paused_ = false;
  bool busy_ = false;  // the producer is gathering outside the lock
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ls::data
