// The document that -o json and -o yaml print: an ordered tree of JSON values, rendered as
// readable JSON (int64s as numbers, "->" not "\u003e", UTF-8 as is) or as block YAML of
// the same content. Keys keep the order they were set in.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fp8::ctl {

class Document {
 public:
  enum class Kind { kNull, kBool, kInt, kUint, kDouble, kString, kArray, kObject };

  Document() = default;  // null
  static Document of_bool(bool v);
  static Document of_int(int64_t v);
  static Document of_uint(uint64_t v);
  // Non-finite values become the strings "NaN", "Infinity", "-Infinity" (as protobuf's
  // JSON mapping has them). `float_precision`: shortest text that reads back as this
  // float rather than as this double (0.1f prints 0.1, not 0.10000000149011612).
  static Document of_double(double v, bool float_precision = false);
  static Document of_string(std::string v);
  static Document array();
  static Document object();

  Kind kind() const { return kind_; }
  // Appends to an array; sets (or replaces) a key of an object. Return *this.
  Document& add(Document v);
  Document& set(const std::string& key, Document v);

  // The value of `key` in an object; nullptr when absent or not an object.
  const Document* find(const std::string& key) const;
  const std::vector<Document>& items() const { return items_; }
  const std::vector<std::pair<std::string, Document>>& fields() const { return fields_; }
  const std::string& text() const { return text_; }  // kString; also the number's text

  // Two-space indented JSON ending with a newline.
  std::string json() const;
  // Block YAML ending with a newline ({} and [] for empty containers).
  std::string yaml() const;

 private:
  Kind kind_ = Kind::kNull;
  std::string text_;  // a string's value, or a number's JSON text
  std::vector<Document> items_;
  std::vector<std::pair<std::string, Document>> fields_;
};

}  // namespace fp8::ctl
