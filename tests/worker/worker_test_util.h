// Helpers for fp8-worker tests: a fresh folder per test, executable scripts that stand in
// for fp8-train, file reading, and polling with a generous limit (never a timing assert:
// the limit only keeps a broken test from hanging).
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace fp8::worker::testing {

// A new empty folder under $TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes "#!/bin/sh\n<body>" to path and makes it executable.
void write_script(const std::string& path, const std::string& body);
std::string read_file(const std::string& path);

// Calls done() every 10 ms until it returns true or `limit` passes; returns its last value.
bool wait_for(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(30));

}  // namespace fp8::worker::testing
