// Producer/consumer with one mutex and two condition variables. The producer gathers outside the
// lock (busy_), so next() only waits when nothing is ready; seek() pauses the producer, waits
// for it to be idle, then moves the iterator under the lock.
#include <lockstep/data/prefetch.h>

#include <utility>

#include <lockstep/clock.h>
#include <lockstep/error.h>

namespace ls::data {

Prefetcher::Prefetcher(const Dataset& ds, Sampler& sampler, int64_t batch_size, bool drop_last,
                       PrefetchOptions options)
    : sampler_(sampler),
      iterator_(ds, sampler, batch_size, drop_last),
      options_(std::move(options)),
      epoch_(sampler.epoch()) {
  LS_CHECK(options_.depth >= 1, "Prefetcher: depth is ", options_.depth,
           "; it must be >= 1 (2 keeps one batch ready while the next is gathered)");
  thread_ = std::thread([this] { produce(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  producer_cv_.notify_all();
  thread_.join();
}

void Prefetcher::produce() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    producer_cv_.wait(lock, [&] {
      return stop_ || (!paused_ && !error_ && ready_.size() < static_cast<size_t>(options_.depth));
    });
    if (stop_) return;
    Item item;
    if (!spare_.empty()) {
      item.batch = std::move(spare_.back());
      spare_.pop_back();
    }
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      const int64_t epoch = sampler_.epoch(), index = iterator_.position();
      if (options_.on_produce) options_.on_produce(epoch, index);
      const int64_t begin_ns = options_.on_gathered ? steady_now_ns() : 0;
      if (!iterator_.next(item.batch)) {
        item.end_of_epoch = true;
        iterator_.seek(sampler_.epoch() + 1, 0);
      } else if (options_.on_gathered) {
        options_.on_gathered(epoch, index, begin_ns, steady_now_ns());
      }
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    if (error) {
      error_ = error;
      spare_.push_back(std::move(item.batch));
    } else if (!paused_) {
      ready_.push_back(std::move(item));
    } else {
      spare_.push_back(std::move(item.batch));
    }
    consumer_cv_.notify_all();
  }
}

bool Prefetcher::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (ready_.empty() && !error_) {
    ++waits_;
    consumer_cv_.wait(lock, [&] { return !ready_.empty() || error_; });
  }
  if (ready_.empty()) std::rethrow_exception(error_);
  Item& item = ready_.front();
  bool end = item.end_of_epoch;
  if (end) {
    ++epoch_;
    position_ = 0;
  } else {
    std::swap(out, item.batch);
    ++position_;
  }
  spare_.push_back(std::move(item.batch));
  ready_.pop_front();
  lock.unlock();
  producer_cv_.notify_one();
  return !end;
}

void Prefetcher::seek(int64_t epoch, int64_t index) {
  LS_CHECK(epoch >= 0, "Prefetcher::seek: epoch is ", epoch, "; epochs count from 0");
  LS_CHECK(index >= 0 && index <= batches_per_epoch(), "Prefetcher::seek: batch index ", index,
           " is outside 0..", batches_per_epoch(),
           " (batches per epoch); was the checkpoint saved with another batch size?");
  {
    std::unique_lock<std::mutex> lock(mutex_);
    paused_ = true;
    consumer_cv_.wait(lock, [&] { return !busy_; });
    for (Item& item : ready_) spare_.push_back(std::move(item.batch));
    ready_.clear();
    error_ = nullptr;
    iterator_.seek(epoch, index);  // the producer is idle and paused: it cannot touch it
    epoch_ = epoch;
    position_ = index;
    paused_ = false;
  }
  producer_cv_.notify_all();
}

int64_t Prefetcher::ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(ready_.size());
}

}  // namespace ls::data
