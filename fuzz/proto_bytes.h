// Deterministic wire bytes of a message (map entries in key order), for
// comparing messages exactly: NaN payloads and -0.0 included.
#ifndef LOCKSTEP_FUZZ_PROTO_BYTES_H_
#define LOCKSTEP_FUZZ_PROTO_BYTES_H_

#include <string>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"

namespace lockstep::fuzz {

inline std::string DeterministicBytes(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace lockstep::fuzz

#endif  // LOCKSTEP_FUZZ_PROTO_BYTES_H_
