// What the serve tests share: a serve::Responder that records what a client
// of the service would receive (and may go away after a number of stream
// events), and a slot on a distributed session.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "runtime/serve/scheduler.hpp"
#include "runtime/serve/service.hpp"

namespace accord::test {

class RecordingResponder final : public serve::Responder {
 public:
  void respond(serve::HttpResponse response) override {
    std::lock_guard lock(mutex_);
    response_ = std::move(response);
    end();
  }
  void open_stream() override {
    std::lock_guard lock(mutex_);
    response_.status = 200;
    response_.content_type = "text/event-stream";
  }
  void send_event(std::string event) override {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
    if (events_.size() == gone_after_events_) gone_ = true;
  }
  void close_stream() override {
    std::lock_guard lock(mutex_);
    end();
  }
  bool client_gone() const override { return gone_.load(); }

  // The client goes away once it has this many events.
  void go_after(std::size_t events) { gone_after_events_ = events; }

  serve::HttpResponse wait() {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(done_.wait_for(lock, std::chrono::minutes(2), [&] { return answered_; }));
    return response_;
  }
  std::vector<std::string> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  bool answered() {
    std::lock_guard lock(mutex_);
    return answered_;
  }

 private:
  void end() {
    answered_ = true;
    done_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable done_;
  bool answered_ = false;
  serve::HttpResponse response_;
  std::vector<std::string> events_;
  std::size_t gone_after_events_ = 0;
  std::atomic<bool> gone_{false};
};

// A slot on a session of in-process ranks made with `options`.
class DistributedSlot final : public serve::SlotSession {
 public:
  DistributedSlot(const Model& model, const DistributedOptions& options) {
    auto created = DistributedSession::create(model, options);
    EXPECT_TRUE(created) << created.error().message();
    session_ = std::move(*created);
    target_ = std::make_unique<DistributedTarget>(*session_, model);
  }
  GenerationTarget& target() override { return *target_; }
  Status reset() override { return session_->reset(); }

 private:
  std::unique_ptr<DistributedSession> session_;
  std::unique_ptr<DistributedTarget> target_;
};

}  // namespace accord::test
