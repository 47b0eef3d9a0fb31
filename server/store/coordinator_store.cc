#include "server/store/coordinator_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fp8::server::store {
namespace {

// Schema version 1 (tables added later are created by IF NOT EXISTS on an older file).
// Jobs are stored whole as fp8.v1.Job messages (the API's own shape,
// additive-only by the proto's evolution rules), beside the columns queries filter on.
constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, number INTEGER NOT NULL UNIQUE, owner TEXT NOT NULL, state INTEGER NOT NULL,
  submitted_seq INTEGER NOT NULL, idempotency_key TEXT NOT NULL, job BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_owner ON jobs (owner, number);
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL, sequence INTEGER NOT NULL, is_progress INTEGER NOT NULL, event BLOB NOT NULL,
  PRIMARY KEY (job_id, sequence));
CREATE TABLE IF NOT EXISTS logs (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL,
  time_ms INTEGER NOT NULL, text TEXT NOT NULL, level INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS logs_job ON logs (job_id, attempt, rank, id);
CREATE TABLE IF NOT EXISTS amax (
  job_id TEXT NOT NULL, layer TEXT NOT NULL, operand INTEGER NOT NULL, step INTEGER NOT NULL, history BLOB NOT NULL,
  PRIMARY KEY (job_id, layer, operand));
CREATE TABLE IF NOT EXISTS rank_amax (
  job_id TEXT NOT NULL, layer TEXT NOT NULL, operand INTEGER NOT NULL, amaxes BLOB NOT NULL,
  PRIMARY KEY (job_id, layer, operand));
CREATE TABLE IF NOT EXISTS checkpoints (
  job_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, dir TEXT NOT NULL, world_size INTEGER NOT NULL,
  PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS job_folders (dir TEXT PRIMARY KEY, job_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trainer_tokens (hash TEXT PRIMARY KEY, job_id TEXT NOT NULL, attempt INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS workers (
  id TEXT PRIMARY KEY, device_kind INTEGER NOT NULL, device_name TEXT NOT NULL, address TEXT NOT NULL,
  registered_seq INTEGER NOT NULL, cpus INTEGER NOT NULL DEFAULT 0, memory_gb REAL NOT NULL DEFAULT 0);
)sql";

bool is_final(v1::Job::State s) {
  return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
}

template <typename Message>
absl::StatusOr<Message> parse(const std::string& bytes, std::string_view what) {
  Message m;
  if (!m.ParseFromString(bytes)) return absl::DataLossError(absl::StrCat("state database: a stored ", std::string(what), " is damaged"));
  return m;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorStore>> CoordinatorStore::open(const std::string& path) {
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::open(path));
  std::unique_ptr<CoordinatorStore> store(new CoordinatorStore(std::move(db)));
  FP8_RETURN_IF_ERROR(store->migrate());
  return store;
}

absl::StatusOr<std::unique_ptr<CoordinatorStore>> CoordinatorStore::connect() const {
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::open(db_->path()));
  return std::unique_ptr<CoordinatorStore>(new CoordinatorStore(std::move(db)));
}

absl::Status CoordinatorStore::migrate() {
  FP8_RETURN_IF_ERROR(db_->exec(kSchema));
  FP8_ASSIGN_OR_RETURN(Statement version, db_->query("SELECT value FROM meta WHERE key = 'schema'"));
  FP8_ASSIGN_OR_RETURN(bool has_version, version.step());
  if (has_version && version.column_int(0) != 1) {
    return absl::FailedPreconditionError(absl::StrCat("state database ", db_->path(), " has schema version ",
                                                      version.column_int(0), "; this coordinator reads version 1"));
  }
  FP8_RETURN_IF_ERROR(add_missing_columns());
  return db_->exec("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', 1)");
}

absl::StatusOr<bool> CoordinatorStore::has_column(const std::string& table, const std::string& column) {
  FP8_ASSIGN_OR_RETURN(Statement columns, db_->query("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2"));
  columns.bind(1, table).bind(2, column);
  FP8_ASSIGN_OR_RETURN(bool row, columns.step());
  const bool has = row && columns.column_int(0) > 0;
  FP8_RETURN_IF_ERROR(columns.run());
  return has;
}

absl::Status CoordinatorStore::add_missing_columns() {
  // Columns added to version 1 since its first release: a file from before gets them.
  FP8_ASSIGN_OR_RETURN(bool has_cpus, has_column("workers", "cpus"));
  if (!has_cpus) {
    FP8_RETURN_IF_ERROR(db_->exec("ALTER TABLE workers ADD COLUMN cpus INTEGER NOT NULL DEFAULT 0; "
                                  "ALTER TABLE workers ADD COLUMN memory_gb REAL NOT NULL DEFAULT 0;"));
  }
  FP8_ASSIGN_OR_RETURN(bool has_level, has_column("logs", "level"));
  if (!has_level) FP8_RETURN_IF_ERROR(db_->exec("ALTER TABLE logs ADD COLUMN level INTEGER NOT NULL DEFAULT 0;"));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CoordinatorStore::next(const std::string& counter) {
  FP8_ASSIGN_OR_RETURN(Statement up, db_->query("INSERT INTO meta (key, value) VALUES (?1, 1) "
                                                "ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value"));
  up.bind(1, "counter." + counter);
  FP8_ASSIGN_OR_RETURN(bool row, up.step());
  if (!row) return absl::InternalError("state database: counter update returned nothing");
  const int64_t value = up.column_int(0);
  FP8_RETURN_IF_ERROR(up.run());
  return value;
}

absl::Status CoordinatorStore::put_job(const v1::Job& job, int64_t number, int64_t submitted_seq) {
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query(
      "INSERT INTO jobs (id, number, owner, state, submitted_seq, idempotency_key, job) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO UPDATE SET state = ?4, job = ?7"));
  return put.bind(1, job.id()).bind(2, number).bind(3, job.spec().owner()).bind(4, int64_t{job.state()})
      .bind(5, submitted_seq).bind(6, job.idempotency_key()).bind_blob(7, job.SerializeAsString()).run();
}

absl::StatusOr<std::optional<v1::Job>> CoordinatorStore::job(const std::string& id) {
  FP8_ASSIGN_OR_RETURN(Statement get, db_->query("SELECT job FROM jobs WHERE id = ?1"));
  get.bind(1, id);
  FP8_ASSIGN_OR_RETURN(bool row, get.step());
  if (!row) return std::optional<v1::Job>();
  FP8_ASSIGN_OR_RETURN(v1::Job job, parse<v1::Job>(get.column_blob(0), "job"));
  return std::optional<v1::Job>(std::move(job));
}

absl::StatusOr<std::vector<std::pair<int64_t, v1::Job>>> CoordinatorStore::list_jobs(const ListFilter& filter) {
  // The state filter is applied here rather than in SQL: the list of states is short and
  // a page is bounded by `limit`, so the scan stops as soon as the page is full.
  FP8_ASSIGN_OR_RETURN(Statement list, db_->query(
      "SELECT number, job, state FROM jobs WHERE (?1 = '' OR owner = ?1) AND (?2 = 0 OR number < ?2) "
      "ORDER BY number DESC"));
  list.bind(1, filter.owner).bind(2, filter.before_number);
  std::vector<std::pair<int64_t, v1::Job>> out;
  while (static_cast<int>(out.size()) < filter.limit) {
    FP8_ASSIGN_OR_RETURN(bool row, list.step());
    if (!row) break;
    const auto state = static_cast<v1::Job::State>(list.column_int(2));
    if (!filter.states.empty() && std::find(filter.states.begin(), filter.states.end(), state) == filter.states.end()) {
      continue;
    }
    FP8_ASSIGN_OR_RETURN(v1::Job job, parse<v1::Job>(list.column_blob(1), "job"));
    out.emplace_back(list.column_int(0), std::move(job));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<int64_t, v1::Job>>> CoordinatorStore::active_jobs() {
  FP8_ASSIGN_OR_RETURN(Statement list, db_->query("SELECT submitted_seq, job, state FROM jobs "
                                                  "WHERE state NOT IN (4, 5, 6) ORDER BY submitted_seq"));
  std::vector<std::pair<int64_t, v1::Job>> out;
  for (;;) {
    FP8_ASSIGN_OR_RETURN(bool row, list.step());
    if (!row) break;
    if (is_final(static_cast<v1::Job::State>(list.column_int(2)))) continue;
    FP8_ASSIGN_OR_RETURN(v1::Job job, parse<v1::Job>(list.column_blob(1), "job"));
    out.emplace_back(list.column_int(0), std::move(job));
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> CoordinatorStore::job_by_idempotency_key(const std::string& owner,
                                                                                     const std::string& key) {
  FP8_ASSIGN_OR_RETURN(Statement find, db_->query("SELECT id FROM jobs WHERE owner = ?1 AND idempotency_key = ?2"));
  find.bind(1, owner).bind(2, key);
  FP8_ASSIGN_OR_RETURN(bool row, find.step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(find.column_text(0));
}

absl::StatusOr<int64_t> CoordinatorStore::append_event(v1::JobEvent& event) {
  FP8_ASSIGN_OR_RETURN(Statement last, db_->query("SELECT COALESCE(MAX(sequence), 0) FROM events WHERE job_id = ?1"));
  last.bind(1, event.job_id());
  FP8_ASSIGN_OR_RETURN(bool row, last.step());
  const int64_t sequence = (row ? last.column_int(0) : 0) + 1;
  event.set_sequence(sequence);
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query(
      "INSERT INTO events (job_id, sequence, is_progress, event) VALUES (?1, ?2, ?3, ?4)"));
  FP8_RETURN_IF_ERROR(put.bind(1, event.job_id()).bind(2, sequence).bind(3, int64_t{event.has_progress()})
                          .bind_blob(4, event.SerializeAsString()).run());
  return sequence;
}

absl::StatusOr<std::vector<v1::JobEvent>> CoordinatorStore::events_after(const std::string& job_id,
                                                                         int64_t after_sequence,
                                                                         bool include_progress, int limit) {
  FP8_ASSIGN_OR_RETURN(Statement list, db_->query(
      "SELECT event FROM events WHERE job_id = ?1 AND sequence > ?2 AND (?3 = 1 OR is_progress = 0) "
      "ORDER BY sequence LIMIT ?4"));
  list.bind(1, job_id).bind(2, after_sequence).bind(3, int64_t{include_progress}).bind(4, int64_t{limit});
  std::vector<v1::JobEvent> out;
  for (;;) {
    FP8_ASSIGN_OR_RETURN(bool row, list.step());
    if (!row) break;
    FP8_ASSIGN_OR_RETURN(v1::JobEvent event, parse<v1::JobEvent>(list.column_blob(0), "event"));
    out.push_back(std::move(event));
  }
  return out;
}

absl::Status CoordinatorStore::thin_progress(const std::string& job_id, int keep) {
  FP8_ASSIGN_OR_RETURN(Statement count, db_->query("SELECT COUNT(*) FROM events WHERE job_id = ?1 AND is_progress = 1"));
  count.bind(1, job_id);
  FP8_ASSIGN_OR_RETURN(bool row, count.step());
  const int64_t n = row ? count.column_int(0) : 0;
  FP8_RETURN_IF_ERROR(count.run());
  if (n <= keep) return absl::OkStatus();
  // Of the older half, drop the events at odd positions.
  FP8_ASSIGN_OR_RETURN(Statement thin, db_->query(
      "DELETE FROM events WHERE job_id = ?1 AND sequence IN ("
      "  SELECT sequence FROM (SELECT sequence, ROW_NUMBER() OVER (ORDER BY sequence) AS position"
      "                        FROM events WHERE job_id = ?1 AND is_progress = 1 ORDER BY sequence LIMIT ?2)"
      "  WHERE position % 2 = 0)"));
  return thin.bind(1, job_id).bind(2, n / 2).run();
}

absl::Status CoordinatorStore::append_logs(const std::string& job_id, int attempt, int rank,
                                           const std::vector<v1::LogLine>& lines, int64_t keep_per_job) {
  for (const v1::LogLine& line : lines) {
    FP8_ASSIGN_OR_RETURN(Statement put, db_->query("INSERT INTO logs (job_id, attempt, rank, time_ms, text, level) "
                                                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
    FP8_RETURN_IF_ERROR(put.bind(1, job_id).bind(2, int64_t{attempt}).bind(3, int64_t{rank})
                            .bind(4, line.time_unix_ms()).bind(5, line.text()).bind(6, int64_t{line.level()}).run());
  }
  // The bound: drop the job's oldest lines beyond keep_per_job.
  FP8_ASSIGN_OR_RETURN(Statement trim, db_->query(
      "DELETE FROM logs WHERE job_id = ?1 AND id <= (SELECT id FROM logs WHERE job_id = ?1 "
      "ORDER BY id DESC LIMIT 1 OFFSET ?2)"));
  return trim.bind(1, job_id).bind(2, keep_per_job).run();
}

absl::StatusOr<LogTail> CoordinatorStore::tail_logs(const std::string& job_id, int attempt, std::optional<int> rank,
                                                    int lines, std::optional<int64_t> after_sequence) {
  const bool after = after_sequence.has_value();
  FP8_ASSIGN_OR_RETURN(Statement tail, db_->query(
      after ? "SELECT id, rank, time_ms, text, level FROM logs WHERE job_id = ?1 AND attempt = ?2 "
              "AND (?3 < 0 OR rank = ?3) AND id > ?5 ORDER BY id ASC LIMIT ?4"
            : "SELECT id, rank, time_ms, text, level FROM logs WHERE job_id = ?1 AND attempt = ?2 "
              "AND (?3 < 0 OR rank = ?3) "
              "ORDER BY id DESC LIMIT ?4"));
  tail.bind(1, job_id).bind(2, int64_t{attempt}).bind(3, int64_t{rank.value_or(-1)}).bind(4, int64_t{lines} + 1);
  if (after) tail.bind(5, *after_sequence);
  LogTail out;
  for (;;) {
    FP8_ASSIGN_OR_RETURN(bool row, tail.step());
    if (!row) break;
    if (static_cast<int>(out.lines.size()) == lines) {
      out.truncated = true;
      break;
    }
    v1::JobLogLine& l = out.lines.emplace_back();
    l.set_attempt(attempt);
    l.set_sequence(tail.column_int(0));
    l.set_rank(static_cast<int32_t>(tail.column_int(1)));
    l.mutable_line()->set_time_unix_ms(tail.column_int(2));
    l.mutable_line()->set_text(tail.column_text(3));
    const int64_t level = tail.column_int(4);
    l.mutable_line()->set_level(v1::LogLine::Level_IsValid(static_cast<int>(level))
                                    ? static_cast<v1::LogLine::Level>(level)
                                    : v1::LogLine::LEVEL_UNSPECIFIED);
  }
  FP8_RETURN_IF_ERROR(tail.run());
  if (!after) std::reverse(out.lines.begin(), out.lines.end());
  return out;
}

absl::Status CoordinatorStore::put_amax(const std::string& job_id, int64_t step, const v1::AmaxHistory& history) {
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query(
      "INSERT INTO amax (job_id, layer, operand, step, history) VALUES (?1, ?2, ?3, ?4, ?5) "
      "ON CONFLICT (job_id, layer, operand) DO UPDATE SET step = ?4, history = ?5"));
  return put.bind(1, job_id).bind(2, history.layer()).bind(3, int64_t{history.operand()}).bind(4, step)
      .bind_blob(5, history.SerializeAsString()).run();
}

absl::StatusOr<StoredAmax> CoordinatorStore::amax(const std::string& job_id) {
  FP8_ASSIGN_OR_RETURN(Statement list, db_->query(
      "SELECT step, history FROM amax WHERE job_id = ?1 ORDER BY layer, operand"));
  list.bind(1, job_id);
  StoredAmax out;
  for (;;) {
    FP8_ASSIGN_OR_RETURN(bool row, list.step());
    if (!row) break;
    out.step = std::max(out.step, list.column_int(0));
    out.steps.push_back(list.column_int(0));
    FP8_ASSIGN_OR_RETURN(v1::AmaxHistory h, parse<v1::AmaxHistory>(list.column_blob(1), "amax history"));
    out.histories.push_back(std::move(h));
  }
  return out;
}

absl::Status CoordinatorStore::put_rank_amaxes(const std::string& job_id, const std::vector<v1::RankAmaxes>& casts) {
  for (const v1::RankAmaxes& c : casts) {
    FP8_ASSIGN_OR_RETURN(Statement put, db_->query(
        "INSERT INTO rank_amax (job_id, layer, operand, amaxes) VALUES (?1, ?2, ?3, ?4) "
        "ON CONFLICT (job_id, layer, operand) DO UPDATE SET amaxes = ?4"));
    FP8_RETURN_IF_ERROR(put.bind(1, job_id).bind(2, c.layer()).bind(3, int64_t{c.operand()})
                            .bind_blob(4, c.SerializeAsString()).run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::RankAmaxes>> CoordinatorStore::rank_amaxes(const std::string& job_id) {
  FP8_ASSIGN_OR_RETURN(Statement list,
                       db_->query("SELECT amaxes FROM rank_amax WHERE job_id = ?1 ORDER BY layer, operand"));
  list.bind(1, job_id);
  std::vector<v1::RankAmaxes> out;
  for (;;) {
    FP8_ASSIGN_OR_RETURN(bool row, list.step());
    if (!row) break;
    FP8_ASSIGN_OR_RETURN(v1::RankAmaxes c, parse<v1::RankAmaxes>(list.column_blob(0), "per-rank amax"));
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status CoordinatorStore::add_checkpoint(const std::string& job_id, int attempt, int64_t step,
                                              const std::string& dir, int world_size) {
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query(
      "INSERT OR REPLACE INTO checkpoints (job_id, step, attempt, dir, world_size) VALUES (?1, ?2, ?3, ?4, ?5)"));
  return put.bind(1, job_id).bind(2, step).bind(3, int64_t{attempt}).bind(4, dir).bind(5, int64_t{world_size}).run();
}

absl::Status CoordinatorStore::add_job_folder(const std::string& dir, const std::string& job_id) {
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query("INSERT OR IGNORE INTO job_folders (dir, job_id) VALUES (?1, ?2)"));
  return put.bind(1, dir).bind(2, job_id).run();
}

absl::StatusOr<std::optional<std::string>> CoordinatorStore::job_of_folder(const std::string& dir) {
  FP8_ASSIGN_OR_RETURN(Statement get, db_->query("SELECT job_id FROM job_folders WHERE dir = ?1"));
  get.bind(1, dir);
  FP8_ASSIGN_OR_RETURN(bool row, get.step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(get.column_text(0));
}

absl::Status CoordinatorStore::add_token(const std::string& hash, const TokenRecord& record) {
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query("INSERT INTO tokens (hash, name, role) VALUES (?1, ?2, ?3)"));
  return put.bind(1, hash).bind(2, record.name).bind(3, std::string_view(role_name(record.role))).run();
}

absl::StatusOr<std::optional<TokenRecord>> CoordinatorStore::token(const std::string& hash) {
  FP8_ASSIGN_OR_RETURN(Statement get, db_->query("SELECT name, role FROM tokens WHERE hash = ?1"));
  get.bind(1, hash);
  FP8_ASSIGN_OR_RETURN(bool row, get.step());
  if (!row) return std::optional<TokenRecord>();
  FP8_ASSIGN_OR_RETURN(Role role, parse_role(get.column_text(1)));
  return std::optional<TokenRecord>(TokenRecord{get.column_text(0), role});
}

absl::StatusOr<int64_t> CoordinatorStore::count_tokens() {
  FP8_ASSIGN_OR_RETURN(Statement count, db_->query("SELECT COUNT(*) FROM tokens"));
  FP8_ASSIGN_OR_RETURN(bool row, count.step());
  return row ? count.column_int(0) : 0;
}

absl::Status CoordinatorStore::add_trainer_token(const std::string& hash, const TrainerTokenRecord& record) {
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query(
      "INSERT OR REPLACE INTO trainer_tokens (hash, job_id, attempt) VALUES (?1, ?2, ?3)"));
  return put.bind(1, hash).bind(2, record.job_id).bind(3, int64_t{record.attempt}).run();
}

absl::StatusOr<std::optional<TrainerTokenRecord>> CoordinatorStore::trainer_token(const std::string& hash) {
  FP8_ASSIGN_OR_RETURN(Statement get, db_->query("SELECT job_id, attempt FROM trainer_tokens WHERE hash = ?1"));
  get.bind(1, hash);
  FP8_ASSIGN_OR_RETURN(bool row, get.step());
  if (!row) return std::optional<TrainerTokenRecord>();
  return std::optional<TrainerTokenRecord>(
      TrainerTokenRecord{get.column_text(0), static_cast<int>(get.column_int(1))});
}

absl::Status CoordinatorStore::delete_trainer_tokens(const std::string& job_id, int attempt) {
  FP8_ASSIGN_OR_RETURN(Statement del, db_->query("DELETE FROM trainer_tokens WHERE job_id = ?1 AND attempt = ?2"));
  return del.bind(1, job_id).bind(2, int64_t{attempt}).run();
}

absl::Status CoordinatorStore::put_worker(const WorkerRecord& w) {
  FP8_ASSIGN_OR_RETURN(Statement put, db_->query(
      "INSERT OR REPLACE INTO workers (id, device_kind, device_name, address, registered_seq, cpus, memory_gb) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  return put.bind(1, w.id).bind(2, int64_t{w.device_kind}).bind(3, w.device_name).bind(4, w.address)
      .bind(5, w.registered_seq).bind(6, int64_t{w.cpus}).bind_double(7, w.memory_gb).run();
}

absl::Status CoordinatorStore::delete_worker(const std::string& id) {
  FP8_ASSIGN_OR_RETURN(Statement del, db_->query("DELETE FROM workers WHERE id = ?1"));
  return del.bind(1, id).run();
}

absl::StatusOr<std::vector<WorkerRecord>> CoordinatorStore::workers() {
  FP8_ASSIGN_OR_RETURN(Statement list, db_->query(
      "SELECT id, device_kind, device_name, address, registered_seq, cpus, memory_gb FROM workers "
      "ORDER BY registered_seq"));
  std::vector<WorkerRecord> out;
  for (;;) {
    FP8_ASSIGN_OR_RETURN(bool row, list.step());
    if (!row) break;
    out.push_back(WorkerRecord{list.column_text(0), static_cast<int>(list.column_int(1)), list.column_text(2),
                               list.column_text(3), list.column_int(4), static_cast<int>(list.column_int(5)),
                               list.column_double(6)});
  }
  return out;
}

}  // namespace fp8::server::store
