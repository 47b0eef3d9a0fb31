#include "server/store/sqlite.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace fp8::server::store {
namespace {

absl::Status error(sqlite3* db, std::string_view what) {
  return absl::InternalError(absl::StrCat("sqlite: ", std::string(what), ": ", sqlite3_errmsg(db)));
}

}  // namespace

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_reset(stmt_);
}

Statement& Statement::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::bind_double(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::bind_blob(int index, std::string_view bytes) {
  sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  return *this;
}

absl::StatusOr<bool> Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return error(db_, sqlite3_sql(stmt_));
}

absl::Status Statement::run() {
  for (;;) {
    absl::StatusOr<bool> row = step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t Statement::column_int(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::column_double(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::column_text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text),
                                                        static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::string Statement::column_blob(int column) const {
  const void* blob = sqlite3_column_blob(stmt_, column);
  return blob == nullptr ? std::string() : std::string(static_cast<const char*>(blob),
                                                        static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

bool Statement::column_is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

absl::StatusOr<std::unique_ptr<Database>> Database::open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = absl::FailedPreconditionError(
        absl::StrCat("cannot open the state database ", path, ": ", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<Database> out(new Database(db, path));
  sqlite3_busy_timeout(db, 5000);
  // WAL: readers never block the writer, and a crash loses at most the transactions not
  // yet synced; synchronous=NORMAL keeps the database consistent through a process kill
  // (the case the coordinator must survive) without an fsync per commit.
  if (absl::Status s = out->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
      !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("state database ", path, ": ", s.message()));
  }
  return out;
}

Database::~Database() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

absl::Status Database::exec(std::string_view sql) {
  std::string text(sql);
  char* message = nullptr;
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    absl::Status s = absl::InternalError(absl::StrCat("sqlite: ", text.substr(0, 80), ": ", message ? message : "?"));
    sqlite3_free(message);
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<Statement> Database::query(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt,
                           nullptr) != SQLITE_OK) {
      return error(db_, sql);
    }
    it = cache_.emplace(sql, stmt).first;
  }
  sqlite3_reset(it->second);
  sqlite3_clear_bindings(it->second);
  return Statement(db_, it->second);
}

int64_t Database::changes() const { return sqlite3_changes64(db_); }

}  // namespace fp8::server::store
