// The coordinator's durable state in one SQLite file (WAL): jobs (each a fp8.v1.Job
// message with its attempt history), their events, log lines, amax histories,
// checkpoints, job folders, workers, and the hashes of the tokens that may call it.
//
// A coordinator killed at any instant and restarted finds every committed change: each
// state change is written in one transaction together with the event that records it.
// Each connection has one caller at a time: the coordinator serialises its calls on each
// (a mutex per connection); `fp8-coordinator token` may add tokens from another process
// meanwhile (SQLite's locking covers that, as it does between connections).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/v1/job_service.pb.h"
#include "fp8/v1/trainer_service.pb.h"
#include "server/auth/token.h"
#include "server/store/sqlite.h"

namespace fp8::server::store {

struct TokenRecord {
  std::string name;
  Role role = Role::kUser;
};

struct TrainerTokenRecord {
  std::string job_id;
  int attempt = 0;
};

struct WorkerRecord {
  std::string id;
  int device_kind = 0;  // v1::ResourceSpec::Device
  std::string device_name;
  std::string address;
  int64_t registered_seq = 0;
  int cpus = 0;           // offered to a rank; 0: unknown
  double memory_gb = 0;   // offered to a rank; 0: unknown
};

struct LogTail {
  std::vector<v1::JobLogLine> lines;  // oldest first, each with its sequence
  bool truncated = false;
};

struct StoredAmax {
  int64_t step = 0;                       // the newest of `steps`
  std::vector<int64_t> steps;             // the step each history was reported at
  std::vector<v1::AmaxHistory> histories;
};

struct ListFilter {
  std::string owner;                 // empty: every owner
  std::vector<v1::Job::State> states;  // empty: every state
  int64_t before_number = 0;         // only jobs numbered below this (paging); 0: no bound
  int limit = 100;
};

class CoordinatorStore {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorStore>> open(const std::string& path);
  // Another connection to this store's database (its schema already in place): a writer
  // that must not wait for this connection's caller, such as the coordinator's progress
  // flushes. SQLite serialises the two connections' transactions.
  absl::StatusOr<std::unique_ptr<CoordinatorStore>> connect() const;

  template <typename Body>
  absl::Status transaction(Body&& body) { return db_->transaction(std::forward<Body>(body)); }

  // Named counters that only grow ("job", "worker", "submission"): returns the next value
  // (1 the first time).
  absl::StatusOr<int64_t> next(const std::string& counter);

  // ---- jobs -------------------------------------------------------------------------------
  // Inserts or replaces the job; number is its n in "job-<n>", submitted_seq its place in
  // the queue.
  absl::Status put_job(const v1::Job& job, int64_t number, int64_t submitted_seq);
  absl::StatusOr<std::optional<v1::Job>> job(const std::string& id);
  // Newest first.
  absl::StatusOr<std::vector<std::pair<int64_t, v1::Job>>> list_jobs(const ListFilter& filter);
  // Jobs not in a final state, with their submission order, oldest first.
  absl::StatusOr<std::vector<std::pair<int64_t, v1::Job>>> active_jobs();
  absl::StatusOr<std::optional<std::string>> job_by_idempotency_key(const std::string& owner, const std::string& key);

  // ---- events --------------------------------------------------------------------------
  // Stores the event with the job's next sequence number, which it returns (and sets).
  absl::StatusOr<int64_t> append_event(v1::JobEvent& event);
  absl::StatusOr<std::vector<v1::JobEvent>> events_after(const std::string& job_id, int64_t after_sequence,
                                                         bool include_progress, int limit);
  // Progress events beyond `keep` for a job are thinned: every other one of the older
  // half goes, so a long job keeps a coarse early history and a fine recent one.
  absl::Status thin_progress(const std::string& job_id, int keep);

  // ---- logs, bounded per job ------------------------------------------------------------
  absl::Status append_logs(const std::string& job_id, int attempt, int rank, const std::vector<v1::LogLine>& lines,
                           int64_t keep_per_job);
  // The newest `lines` lines; with after_sequence instead the oldest `lines` lines whose
  // sequence (the row id: it only grows) is greater, truncated meaning more follow.
  absl::StatusOr<LogTail> tail_logs(const std::string& job_id, int attempt, std::optional<int> rank, int lines,
                                    std::optional<int64_t> after_sequence = std::nullopt);

  // ---- amax histories (merged), latest per (layer, operand) -------------------------------
  absl::Status put_amax(const std::string& job_id, int64_t step, const v1::AmaxHistory& history);
  absl::StatusOr<StoredAmax> amax(const std::string& job_id);

  // ---- each rank's amax per cast (the coordinator's RankAmax state, as v1::RankAmaxes with
  // `history` its closed points), so that `fp8ctl amax --by-rank` outlives a restart ----------
  absl::Status put_rank_amaxes(const std::string& job_id, const std::vector<v1::RankAmaxes>& casts);
  absl::StatusOr<std::vector<v1::RankAmaxes>> rank_amaxes(const std::string& job_id);

  // ---- checkpoints -----------------------------------------------------------------------
  absl::Status add_checkpoint(const std::string& job_id, int attempt, int64_t step, const std::string& dir,
                              int world_size);

  // ---- job folders: each job's own checkpoint folder, by path ---------------------------
  // Records `dir` as job_id's folder; a folder already recorded keeps its job.
  absl::Status add_job_folder(const std::string& dir, const std::string& job_id);
  // The job whose folder `dir` is, if any.
  absl::StatusOr<std::optional<std::string>> job_of_folder(const std::string& dir);

  // ---- tokens ---------------------------------------------------------------------------
  absl::Status add_token(const std::string& hash, const TokenRecord& record);
  absl::StatusOr<std::optional<TokenRecord>> token(const std::string& hash);
  absl::StatusOr<int64_t> count_tokens();
  absl::Status add_trainer_token(const std::string& hash, const TrainerTokenRecord& record);
  absl::StatusOr<std::optional<TrainerTokenRecord>> trainer_token(const std::string& hash);
  absl::Status delete_trainer_tokens(const std::string& job_id, int attempt);

  // ---- workers ------------------------------------------------------------------------
  absl::Status put_worker(const WorkerRecord& worker);
  absl::Status delete_worker(const std::string& id);
  absl::StatusOr<std::vector<WorkerRecord>> workers();

 private:
  explicit CoordinatorStore(std::unique_ptr<Database> db) : db_(std::move(db)) {}
  absl::Status migrate();
  absl::Status add_missing_columns();
  absl::StatusOr<bool> has_column(const std::string& table, const std::string& column);
  std::unique_ptr<Database> db_;
};

}  // namespace fp8::server::store
