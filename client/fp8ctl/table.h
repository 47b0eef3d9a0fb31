// Column-aligned text tables for `fp8ctl list` and `describe`: a header row, columns
// padded to their widest cell (counted in characters, not bytes), three spaces apart.
#pragma once

#include <string>
#include <vector>

namespace fp8::ctl {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  // A row shorter than the header is padded with empty cells; a longer one is cut.
  void add_row(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  // Every line ends with '\n'; the last column carries no trailing spaces.
  std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Characters in UTF-8 text (continuation bytes not counted).
size_t display_width(const std::string& text);

}  // namespace fp8::ctl
