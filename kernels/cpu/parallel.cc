#include "cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace fp8::cpu {
namespace {

thread_local bool t_inside_pool_task = false;

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // One job at a time: callers from different threads queue on run_mu_.
  void run(int64_t chunks, const std::function<void(int64_t)>& task) {
    std::lock_guard run_lock(run_mu_);
    {
      std::lock_guard lock(mu_);
      task_ = &task;
      chunks_ = chunks;
      next_.store(0);
      done_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    drain();
    // Wait for every chunk and for every worker to have left this job, so no worker
    // can carry this task pointer into the next job.
    std::unique_lock lock(mu_);
    finished_.wait(lock, [&] { return done_ == chunks_ && active_ == 0; });
    task_ = nullptr;
  }

 private:
  void drain() {
    const auto* task = task_;
    const bool was_inside = t_inside_pool_task;
    t_inside_pool_task = true;
    int64_t finished_here = 0;
    for (int64_t c = next_.fetch_add(1); c < chunks_; c = next_.fetch_add(1)) {
      (*task)(c);
      ++finished_here;
    }
    t_inside_pool_task = was_inside;
    if (finished_here > 0) {
      std::lock_guard lock(mu_);
      done_ += finished_here;
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && task_ != nullptr); });
        if (stopping_) return;
        seen = generation_;
        ++active_;
      }
      drain();
      std::lock_guard lock(mu_);
      --active_;
      finished_.notify_all();
    }
  }

  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int64_t done_ = 0;
  int active_ = 0;  // workers inside the current job
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

std::atomic<int> g_requested_threads{0};  // set_num_threads(); 0: the machine's
std::atomic<bool> g_pool_made{false};

int size_on_first_use() {
  g_pool_made.store(true);
  return configured_num_threads();
}

Pool& pool() {
  static Pool p(size_on_first_use());
  return p;
}

}  // namespace

bool set_num_threads(int n) {
  if (n < 1 || g_pool_made.load()) return false;
  g_requested_threads.store(n);
  return !g_pool_made.load();
}

int configured_num_threads() {
  const int requested = g_requested_threads.load();
  return requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int num_threads() { return pool().size(); }

int64_t plan_chunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(grain, 1);
  const int64_t by_grain = (n + grain - 1) / grain;
  return std::min<int64_t>(by_grain, num_threads());
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t chunks = plan_chunks(n, grain);
  if (chunks == 0) return;
  const int64_t per = (n + chunks - 1) / chunks;
  auto run_chunk = [&](int64_t c) {
    const int64_t begin = c * per;
    const int64_t end = std::min(n, begin + per);
    if (begin < end) fn(c, begin, end);
  };
  if (chunks == 1 || t_inside_pool_task) {
    for (int64_t c = 0; c < chunks; ++c) run_chunk(c);
    return;
  }
  const std::function<void(int64_t)> task = run_chunk;
  pool().run(chunks, task);
}

}  // namespace fp8::cpu
