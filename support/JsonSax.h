//===- JsonSax.h - A SAX handler that accepts every event
//------------------===//
//
// The JSON readers that scan a document without building it (the nesting
// limit, a parse error's offset) each care about one or two events; this
// base accepts every event, so a reader overrides only those.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SUPPORT_JSONSAX_H
#define SPANC_SUPPORT_JSONSAX_H

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace spanc::support {

/// Accepts and drops every event of nlohmann's SAX interface for the
/// document type `Json`; a parse error stops the parser.
template <typename Json> struct AcceptingJsonSax : nlohmann::json_sax<Json> {
  using typename nlohmann::json_sax<Json>::number_integer_t;
  using typename nlohmann::json_sax<Json>::number_unsigned_t;
  using typename nlohmann::json_sax<Json>::number_float_t;
  using typename nlohmann::json_sax<Json>::string_t;
  using typename nlohmann::json_sax<Json>::binary_t;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool string(string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t &) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &) override {
    return false;
  }
};

} // namespace spanc::support

#endif // SPANC_SUPPORT_JSONSAX_H
