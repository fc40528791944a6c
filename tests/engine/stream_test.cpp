// Host Stream and Event semantics: asynchronous in-order execution, cross-stream ordering through
// events, error surfacing at synchronization points and across streams, abort.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "engine/core/runtime.h"

namespace ls {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

TEST(HostStream, EnqueueReturnsBeforeWorkRunsAndRunsInOrder) {
  auto stream = device_runtime(kHost0).create_stream();
  std::atomic<bool> release{false};
  std::vector<int> order;
  host_enqueue(*stream, [&] {
    while (!release) std::this_thread::yield();
    order.push_back(1);
  });
  host_enqueue(*stream, [&] { order.push_back(2); });
  EXPECT_TRUE(order.empty());  // enqueue returned while the first task is still blocked
  release = true;
  stream->synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(HostStream, WaitOnEventOrdersWorkAcrossStreams) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto producer = rt.create_stream();
  auto consumer = rt.create_stream();
  auto ready = rt.create_event();
  std::atomic<bool> release{false};
  std::atomic<int> value{0};
  int seen = -1;
  host_enqueue(*producer, [&] {
    while (!release) std::this_thread::yield();
    value = 42;
  });
  producer->record(*ready);
  consumer->wait(*ready);
  host_enqueue(*consumer, [&] { seen = value; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(ready->query());
  release = true;
  consumer->synchronize();
  EXPECT_TRUE(ready->query());
  EXPECT_EQ(seen, 42);
}

TEST(HostStream, NeverRecordedEventIsComplete) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto stream = rt.create_stream();
  auto event = rt.create_event();
  EXPECT_TRUE(event->query());
  stream->wait(*event);  // must not block
  stream->synchronize();
  event->synchronize();
}

TEST(HostStream, EventTimesAreOrdered) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto stream = rt.create_stream();
  auto start = rt.create_event();
  auto end = rt.create_event();
  stream->record(*start);
  host_enqueue(*stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  stream->record(*end);
  end->synchronize();
  EXPECT_GE(end->elapsed_ms_since(*start), 9.0);
}

TEST(HostStream, ErrorSurfacesAtSynchronizeOnceAndSkipsLaterWork) {
  auto stream = device_runtime(kHost0).create_stream();
  bool later_ran = false;
  host_enqueue(*stream, [] { LS_THROW("boom in kernel"); });
  host_enqueue(*stream, [&] { later_ran = true; });
  try {
    stream->synchronize();
    FAIL() << "synchronize() did not rethrow";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("boom in kernel"), std::string::npos);
    EXPECT_NE(e.context().find("host:0 stream"), std::string::npos);
  }
  EXPECT_FALSE(later_ran);
  stream->synchronize();  // reported once; the stream is usable again
  host_enqueue(*stream, [&] { later_ran = true; });
  stream->synchronize();
  EXPECT_TRUE(later_ran);
}

TEST(HostStream, ErrorFlowsThroughEventToWaitingStream) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto failing = rt.create_stream();
  auto waiting = rt.create_stream();
  auto event = rt.create_event();
  host_enqueue(*failing, [] { LS_THROW("producer failed"); });
  failing->record(*event);
  waiting->wait(*event);
  EXPECT_THROW(event->synchronize(), Error);
  EXPECT_THROW(waiting->synchronize(), Error);
  EXPECT_THROW(failing->synchronize(), Error);
}

TEST(HostStream, AbortEndsABlockedWait) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto blocked = rt.create_stream();
  auto never = rt.create_stream();
  auto event = rt.create_event();
  std::atomic<bool> release{false};
  host_enqueue(*never, [&] {
    while (!release) std::this_thread::yield();
  });
  never->record(*event);
  blocked->wait(*event);  // would wait until `release`
  blocked->abort();
  EXPECT_THROW(blocked->synchronize(), Error);
  release = true;
  never->synchronize();
}

TEST(HostStream, RejectsEventOfAnotherDevice) {
  auto stream = device_runtime(kHost0).create_stream();
  auto other = device_runtime(Device{DeviceKind::kHost, 1}).create_event();
  EXPECT_THROW(stream->record(*other), Error);
}

}  // namespace
}  // namespace ls
