// The status page's live figures (GET /status/events): a server-sent event
// stream per subscriber, each event one MetricsSnapshot as JSON, the very
// figures /metrics writes. Events go out every period and at once when a
// slot turns poisoned or healing or back, or a heal ends, so a fault shows
// on the page as it happens. A thread of its own takes the snapshots and
// hands each event to the subscribers' Responders (which post it onto the
// I/O thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/serve/metrics.hpp"

namespace accord::serve {

class Responder;  // service.hpp

// The snapshot as the status page reads it (docs/serve.md, "Status page").
std::string status_json(const MetricsSnapshot& snapshot, const std::string& model_id);

class StatusFeed {
 public:
  static constexpr std::chrono::milliseconds kDefaultPeriod{500};

  // `metrics` must outlive the feed.
  StatusFeed(Metrics& metrics, std::string model_id, std::chrono::milliseconds period = kDefaultPeriod);
  ~StatusFeed();  // ends every stream
  StatusFeed(const StatusFeed&) = delete;
  StatusFeed& operator=(const StatusFeed&) = delete;

  // Opens the responder's stream and sends the figures now; later ones
  // follow until the client goes or close() is called. On the caller's
  // thread (the I/O thread).
  void subscribe(const std::shared_ptr<Responder>& responder);
  // Ends every stream, and each later one at once (a shutdown).
  void close();
  int subscribers() const;

 private:
  void run();
  std::string event() const;

  Metrics& metrics_;
  const std::string model_id_;
  const std::chrono::milliseconds period_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool changed_ = false;                                 // guarded by mutex_
  bool closed_ = false;                                  // guarded by mutex_
  bool stopping_ = false;                                // guarded by mutex_
  std::vector<std::shared_ptr<Responder>> subscribers_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace accord::serve
