#include "model/spec_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace lockstep::model {
namespace {

namespace v1 = ::lockstep::v1;

constexpr absl::string_view kBom = "\xEF\xBB\xBF";

absl::string_view StripBom(absl::string_view text) {
  absl::ConsumePrefix(&text, kBom);
  return text;
}

// 1-based line and column (in bytes) of `offset` in `text`.
std::pair<int, int> LineColumn(absl::string_view text, size_t offset) {
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, static_cast<int>(offset - line_start) + 1};
}

// "numClasses" -> "num_classes": proto field names, as protobuf's JSON
// errors spell paths.
std::string SnakeCase(absl::string_view key) {
  std::string out;
  out.reserve(key.size() + 4);
  for (const char c : key) {
    if (c >= 'A' && c <= 'Z') {
      out.push_back('_');
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// A strict RFC 8259 syntax check with positions, run before protobuf's own
// JSON parser (whose errors in protobuf 3.21 carry no line or column, and
// which takes the last of duplicate keys silently). In locate mode it
// instead finds the offset of the member or element at a field path such
// as "layers[2].dense.units".
class JsonChecker {
 public:
  explicit JsonChecker(absl::string_view text) : text_(text) {}

  // OK, or INVALID_ARGUMENT "<line>:<column>: <message>" for the first
  // syntax error.
  absl::Status Check() {
    pos_ = 0;
    SkipSpace();
    std::string path;
    if (!Value(0, &path)) return ErrorStatus();
    SkipSpace();
    if (pos_ != text_.size()) {
      Fail("unexpected text after the end of the JSON object");
      return ErrorStatus();
    }
    return absl::OkStatus();
  }

  // The offset of `path` (which must have passed Check()), if present.
  std::optional<size_t> Locate(absl::string_view path) {
    target_ = std::string(path);
    locating_ = true;
    found_.reset();
    pos_ = 0;
    SkipSpace();
    std::string p;
    Value(0, &p);
    locating_ = false;
    return found_;
  }

 private:
  absl::Status ErrorStatus() const {
    const auto [line, column] = LineColumn(text_, error_pos_);
    return absl::InvalidArgumentError(
        absl::StrFormat("%d:%d: %s", line, column, error_));
  }

  bool Fail(std::string message) {
    if (error_.empty()) {
      error_ = std::move(message);
      error_pos_ = pos_;
    }
    return false;
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipSpace() {
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  // Notes `path` at `offset` in locate mode. Returns true to stop early.
  bool Mark(const std::string& path, size_t offset) {
    if (locating_ && !found_.has_value() && path == target_) {
      found_ = offset;
    }
    return found_.has_value();
  }

  bool Value(int depth, std::string* path) {
    if (depth > kMaxSpecNesting) {
      return Fail(
          absl::StrFormat("nesting deeper than %d levels", kMaxSpecNesting));
    }
    if (AtEnd()) return Fail("unexpected end of input, expected a value");
    switch (Peek()) {
      case '{':
        return Object(depth, path);
      case '[':
        return Array(depth, path);
      case '"':
        return String(nullptr);
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        if (Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) return Number();
        return Fail(absl::StrFormat(
            "expected a value (object, array, string, number, true, false "
            "or null), got '%s'",
            absl::CHexEscape(text_.substr(pos_, 1))));
    }
  }

  bool Object(int depth, std::string* path) {
    ++pos_;  // '{'
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    absl::flat_hash_set<std::string> keys;
    const size_t path_size = path->size();
    while (true) {
      SkipSpace();
      if (Peek() != '"') {
        return Fail(AtEnd() ? "unexpected end of input, expected a \"key\""
                            : "expected a \"key\" in double quotes");
      }
      const size_t key_pos = pos_;
      std::string key;
      if (!String(&key)) return false;
      if (!keys.insert(key).second) {
        pos_ = key_pos;
        return Fail(
            absl::StrFormat("duplicate key \"%s\"", absl::CHexEscape(key)));
      }
      SkipSpace();
      if (Peek() != ':') return Fail("expected ':' after the key");
      ++pos_;
      SkipSpace();
      if (path_size != 0) path->push_back('.');
      path->append(SnakeCase(key));
      if (Mark(*path, key_pos)) return false;
      if (!Value(depth + 1, path)) return false;
      path->resize(path_size);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (Peek() == '}') return Fail("trailing comma before '}'");
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      return Fail(AtEnd() ? "unexpected end of input, expected ',' or '}'"
                          : "expected ',' or '}' after an object member");
    }
  }

  bool Array(int depth, std::string* path) {
    ++pos_;  // '['
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    const size_t path_size = path->size();
    for (int64_t index = 0;; ++index) {
      SkipSpace();
      absl::StrAppend(path, "[", index, "]");
      if (Mark(*path, pos_)) return false;
      if (!Value(depth + 1, path)) return false;
      path->resize(path_size);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (Peek() == ']') return Fail("trailing comma before ']'");
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      return Fail(AtEnd() ? "unexpected end of input, expected ',' or ']'"
                          : "expected ',' or ']' after an array element");
    }
  }

  static int HexValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Four hex digits after "\u".
  bool Hex4(uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = AtEnd() ? -1 : HexValue(text_[pos_]);
      if (h < 0) return Fail("\\u must be followed by four hex digits");
      v = v * 16 + static_cast<uint32_t>(h);
      ++pos_;
    }
    *out = v;
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // One UTF-8 sequence starting at pos_ (a byte >= 0x80): well-formed, not
  // overlong, no surrogates, <= U+10FFFF.
  bool Utf8Sequence(std::string* out) {
    const int length = Utf8SequenceLength(text_, pos_);
    if (length == 0) return Fail("invalid UTF-8 in a string");
    if (out != nullptr) out->append(text_.data() + pos_, length);
    pos_ += length;
    return true;
  }

  // A string at pos_ ('"'); its decoded value goes to `out` when not null.
  bool String(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail("control character in a string (escape it)");
      }
      if (static_cast<unsigned char>(c) >= 0x80) {
        if (!Utf8Sequence(out)) return false;
        continue;
      }
      if (c != '\\') {
        if (out != nullptr) out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (AtEnd()) return Fail("unterminated string");
      const char e = text_[pos_];
      ++pos_;
      char decoded = 0;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          decoded = e;
          break;
        case 'b':
          decoded = '\b';
          break;
        case 'f':
          decoded = '\f';
          break;
        case 'n':
          decoded = '\n';
          break;
        case 'r':
          decoded = '\r';
          break;
        case 't':
          decoded = '\t';
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("unpaired UTF-16 surrogate in a \\u escape");
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") {
              return Fail("unpaired UTF-16 surrogate in a \\u escape");
            }
            pos_ += 2;
            uint32_t low;
            if (!Hex4(&low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) {
              return Fail("unpaired UTF-16 surrogate in a \\u escape");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          if (out != nullptr) AppendUtf8(cp, out);
          continue;
        }
        default:
          --pos_;
          return Fail(absl::StrFormat("invalid escape '\\%s' in a string",
                                      absl::CHexEscape(std::string(1, e))));
      }
      if (out != nullptr) out->push_back(decoded);
    }
  }

  bool Digits() {
    if (AtEnd() || !(Peek() >= '0' && Peek() <= '9')) {
      return Fail("invalid number: expected a digit");
    }
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') ++pos_;
    return true;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool Number() {
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
      if (Peek() >= '0' && Peek() <= '9') {
        return Fail("invalid number: leading zeros are not allowed");
      }
    } else if (!Digits()) {
      return false;
    }
    if (Peek() == '.') {
      ++pos_;
      if (!Digits()) return false;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!Digits()) return false;
    }
    return true;
  }

  bool Literal(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) {
      return Fail(absl::StrCat("invalid literal, expected ", word));
    }
    pos_ += word.size();
    return true;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
  size_t error_pos_ = 0;
  bool locating_ = false;
  std::string target_;
  std::optional<size_t> found_;
};

// "TYPE_INT32" -> "an int32".
std::string DescribeScalarType(absl::string_view type) {
  absl::ConsumePrefix(&type, "TYPE_");
  const std::string lower = absl::AsciiStrToLower(type);
  const bool vowel = !lower.empty() && absl::StrContains("aeiou", lower[0]);
  return absl::StrCat(vowel ? "an " : "a ", lower);
}

// Rewrites one of protobuf 3.21's JSON error messages, e.g.
//   "(layers[0]) foo: Cannot find field."
//   "(layers[0].op): invalid value \"X\" for type type.googleapis.com/T"
// into a field path and a plain message.
std::pair<std::string, std::string> RewriteJsonError(absl::string_view m) {
  std::string path;
  std::string message(m);
  if (absl::StartsWith(m, "(")) {
    const size_t close = m.find(')');
    if (close != absl::string_view::npos) {
      path = std::string(m.substr(1, close - 1));
      absl::string_view rest = m.substr(close + 1);
      if (absl::ConsumePrefix(&rest, ": ")) {
        message = std::string(rest);
      } else if (absl::ConsumePrefix(&rest, " ")) {
        const size_t colon = rest.find(": ");
        if (colon != absl::string_view::npos) {
          absl::StrAppend(&path, path.empty() ? "" : ".",
                          rest.substr(0, colon));
          message = std::string(rest.substr(colon + 2));
        }
      }
    }
  } else {
    // Top-level form: "<key>: Cannot find field."
    const size_t colon = m.find(": ");
    if (colon != absl::string_view::npos &&
        absl::EndsWith(m, "Cannot find field.")) {
      path = std::string(m.substr(0, colon));
      message = std::string(m.substr(colon + 2));
    }
  }
  if (message == "Cannot find field.") {
    message = "unknown field";
  }
  constexpr char kEnumType[] = "for type type.googleapis.com/";
  constexpr char kScalarType[] = "for type TYPE_";
  if (const size_t at = message.find(kEnumType); at != std::string::npos) {
    const std::string type_name = message.substr(at + strlen(kEnumType));
    const google::protobuf::EnumDescriptor* e =
        google::protobuf::DescriptorPool::generated_pool()->FindEnumTypeByName(
            type_name);
    std::string replacement = absl::StrCat("for enum ", type_name);
    if (e != nullptr) {
      std::vector<std::string> names;
      for (int i = 0; i < e->value_count(); ++i) {
        names.push_back(e->value(i)->name());
      }
      replacement =
          absl::StrCat("for enum ", e->name(),
                       "; known values: ", absl::StrJoin(names, ", "));
    }
    message = absl::StrCat(message.substr(0, at), replacement);
  } else if (const size_t at = message.find(kScalarType);
             at != std::string::npos) {
    message = absl::StrCat(
        message.substr(0, at), "for ",
        DescribeScalarType(message.substr(at + strlen("for type "))), " field");
  } else if (absl::StartsWith(message, "invalid value oneof field '")) {
    // "invalid value oneof field 'params' is already set. Cannot set
    // 'conv2d' for type oneof"
    absl::string_view rest = message;
    rest.remove_prefix(strlen("invalid value oneof field '"));
    const std::string oneof(rest.substr(0, rest.find('\'')));
    std::string second;
    if (const size_t s = rest.find("Cannot set '"); s != std::string::npos) {
      absl::string_view tail = rest.substr(s + strlen("Cannot set '"));
      second = std::string(tail.substr(0, tail.find('\'')));
    }
    message = absl::StrFormat(
        "only one member of oneof '%s' may be set, but '%s' is set too", oneof,
        second);
  }
  return {path, message};
}

absl::Status ParseJson(absl::string_view text, absl::string_view filename,
                       google::protobuf::Message* message) {
  JsonChecker checker(text);
  if (absl::Status s = checker.Check(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ":", s.message()));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  options.case_insensitive_enum_parsing = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), message,
      options);
  if (status.ok()) return absl::OkStatus();
  auto [path, what] = RewriteJsonError(
      absl::string_view(status.message().data(), status.message().size()));
  std::string position;
  for (absl::string_view p = path; !p.empty();) {
    if (const auto offset = checker.Locate(p); offset.has_value()) {
      const auto [line, column] = LineColumn(text, *offset);
      position = absl::StrFormat(":%d:%d", line, column);
      break;
    }
    // Try the enclosing field: "a.b[2].c" -> "a.b[2]" -> "a.b" -> "a".
    const size_t cut = p.find_last_of(".[");
    if (cut == absl::string_view::npos) break;
    p = p.substr(0, cut);
  }
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(filename, position, ": ", what));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(filename, position, ": ", path, ": ", what));
}

// Keeps the first error of the text-format parser, with its position.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    ++count_;
    if (count_ > 1) return;
    if (line >= 0) {
      first_ = absl::StrFormat("%d:%d: %s", line + 1, column + 1, message);
    } else {
      first_ = absl::StrCat(" ", message);
    }
  }
  const std::string& first() const { return first_; }
  int count() const { return count_; }

 private:
  std::string first_;
  int count_ = 0;
};

// The path ("layers[1].name") of the first string field of `m` that is not
// UTF-8, or nullopt. Protobuf's text-format parser accepts any bytes in a
// string, but a proto3 string must be UTF-8: the wire parser refuses such
// a message, so the coordinator could not even receive the spec, and the
// JSON form refuses it already.
std::optional<std::string> FindNonUtf8String(
    const google::protobuf::Message& m) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string here =
          f->is_repeated() ? absl::StrCat(f->name(), "[", i, "]") : f->name();
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        const std::string value = f->is_repeated()
                                      ? r->GetRepeatedString(m, f, i)
                                      : r->GetString(m, f);
        if (!IsUtf8(value)) return here;
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        const google::protobuf::Message& sub =
            f->is_repeated() ? r->GetRepeatedMessage(m, f, i)
                             : r->GetMessage(m, f);
        if (std::optional<std::string> inner = FindNonUtf8String(sub)) {
          return absl::StrCat(here, ".", *inner);
        }
      }
    }
  }
  return std::nullopt;
}

// Turns every -0.0 in a float or double field of `m` into +0.0. Zero is
// zero however it is spelled: protobuf's JSON parser reads "-0" as +0.0
// but "-0.0" as -0.0, and the two would otherwise give one config two
// digests.
void ClearNegativeZeros(google::protobuf::Message* m) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(*m, &fields);
  for (const FieldDescriptor* f : fields) {
    const int n = f->is_repeated() ? r->FieldSize(*m, f) : 1;
    for (int i = 0; i < n; ++i) {
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_FLOAT: {
          const float v = f->is_repeated() ? r->GetRepeatedFloat(*m, f, i)
                                           : r->GetFloat(*m, f);
          if (v != 0.0f || !std::signbit(v)) break;
          if (f->is_repeated()) {
            r->SetRepeatedFloat(m, f, i, 0.0f);
          } else {
            r->SetFloat(m, f, 0.0f);
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_DOUBLE: {
          const double v = f->is_repeated() ? r->GetRepeatedDouble(*m, f, i)
                                            : r->GetDouble(*m, f);
          if (v != 0.0 || !std::signbit(v)) break;
          if (f->is_repeated()) {
            r->SetRepeatedDouble(m, f, i, 0.0);
          } else {
            r->SetDouble(m, f, 0.0);
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          ClearNegativeZeros(f->is_repeated()
                                 ? r->MutableRepeatedMessage(m, f, i)
                                 : r->MutableMessage(m, f));
          break;
        default:
          break;
      }
    }
  }
}

absl::Status ParseText(absl::string_view text, absl::string_view filename,
                       google::protobuf::Message* message) {
  FirstErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(false);
  parser.SetRecursionLimit(kMaxSpecNesting);
  const bool ok = parser.ParseFromString(std::string(text), message);
  if (ok && errors.count() == 0) {
    if (std::optional<std::string> path = FindNonUtf8String(*message)) {
      return absl::InvalidArgumentError(absl::StrCat(
          filename, ": ", *path,
          ": invalid UTF-8 in a string (string fields must be UTF-8)"));
    }
    return absl::OkStatus();
  }
  if (errors.count() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(filename, ": not valid protobuf text format for ",
                     message->GetDescriptor()->full_name()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(filename, ":", errors.first()));
}

template <typename T>
absl::StatusOr<T> ParseAs(absl::string_view text, absl::string_view filename) {
  T message;
  LS_RETURN_IF_ERROR(ParseSpec(text, filename, &message));
  return message;
}

}  // namespace

SpecFormat DetectSpecFormat(absl::string_view text) {
  text = absl::StripLeadingAsciiWhitespace(StripBom(text));
  return !text.empty() && text[0] == '{' ? SpecFormat::kJson
                                         : SpecFormat::kTextFormat;
}

absl::Status ParseSpec(absl::string_view text,
                       absl::string_view filename_for_errors,
                       google::protobuf::Message* message) {
  message->Clear();
  text = StripBom(text);
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        filename_for_errors,
        ": is empty; expected a JSON object or protobuf text format for ",
        message->GetDescriptor()->full_name()));
  }
  // Offsets from here on are relative to the text after the BOM; the BOM
  // holds no newline, so lines stay right (columns on line 1 are off by 3
  // bytes only in a file that has one).
  // A JSON array would go to the text parser and fail confusingly there.
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (text[first] == '[') {
    const auto [line, column] = LineColumn(text, first);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%d: a spec is a JSON object or protobuf text format, not a "
        "JSON array",
        filename_for_errors, line, column));
  }
  LS_RETURN_IF_ERROR(DetectSpecFormat(text) == SpecFormat::kJson
                         ? ParseJson(text, filename_for_errors, message)
                         : ParseText(text, filename_for_errors, message));
  ClearNegativeZeros(message);
  return absl::OkStatus();
}

absl::StatusOr<v1::Model> ParseModel(absl::string_view text,
                                     absl::string_view filename_for_errors) {
  return ParseAs<v1::Model>(text, filename_for_errors);
}

absl::StatusOr<v1::JobConfig> ParseJobConfig(
    absl::string_view text, absl::string_view filename_for_errors) {
  return ParseAs<v1::JobConfig>(text, filename_for_errors);
}

absl::StatusOr<std::string> ReadSpecFile(const std::string& path,
                                         absl::string_view what) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no path given"));
  }
  const auto errno_status = [&](int error) -> absl::Status {
    const std::string message = absl::StrFormat(
        "cannot read %s \"%s\": %s", what, path, std::strerror(error));
    switch (error) {
      case ENOENT:
      case ENOTDIR:
        return absl::NotFoundError(message);
      case EACCES:
      case EPERM:
        return absl::PermissionDeniedError(message);
      default:
        return absl::UnavailableError(message);
    }
  };
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return errno_status(errno);
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot read %s \"%s\": is a directory, expected a file", what, path));
  }
  const auto too_big = [&]() {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s \"%s\" exceeds the limit of %d bytes (16 MiB)",
                        what, path, kMaxSpecFileBytes));
  };
  if (S_ISREG(st.st_mode) && st.st_size > kMaxSpecFileBytes) return too_big();
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return errno_status(errno);
  std::string data;
  char buffer[64 * 1024];
  // Reads at most one byte past the limit, so a growing file or a device
  // such as /dev/zero cannot exhaust memory.
  while (static_cast<int64_t>(data.size()) <= kMaxSpecFileBytes) {
    const size_t n = std::fread(buffer, 1, sizeof(buffer), f);
    if (n == 0) break;
    data.append(buffer, n);
  }
  const bool failed = std::ferror(f) != 0;
  const int error = errno;
  std::fclose(f);
  if (failed) return errno_status(error);
  if (static_cast<int64_t>(data.size()) > kMaxSpecFileBytes) return too_big();
  return data;
}

absl::StatusOr<v1::Model> ReadModelFile(const std::string& path) {
  LS_ASSIGN_OR_RETURN(const std::string text, ReadSpecFile(path, "model file"));
  return ParseModel(text, path);
}

absl::StatusOr<v1::JobConfig> ReadJobConfigFile(const std::string& path) {
  LS_ASSIGN_OR_RETURN(const std::string text,
                      ReadSpecFile(path, "job config file"));
  return ParseJobConfig(text, path);
}

}  // namespace lockstep::model
