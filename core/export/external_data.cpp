#include "core/export/external_data.h"

#include <onnx/onnx_pb.h>

namespace qs {

ExternalData moveInitializersToExternal(onnx::ModelProto& proto, const std::string& location, uint64_t minTensorBytes,
                                        const Graph* graph) {
  ExternalData out;
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
    std::string bytes;
    if (t.has_raw_data()) {
      if (t.raw_data().size() < minTensorBytes) continue;
      bytes = std::move(*t.mutable_raw_data());
    } else {
      // Typed fields: the loader's tensor holds the same little-endian layout as raw_data.
      if (!graph) continue;
      ValueId id = graph->findValue(t.name());
      if (id == kNoValue || !graph->value(id).constant) continue;
      const Tensor& c = *graph->value(id).constant;
      if ((int)c.dtype() != t.data_type() || c.byteSize() < minTensorBytes) continue;
      bytes.assign(static_cast<const char*>(c.raw()), c.byteSize());
    }
    out.bytes.resize((out.bytes.size() + 63) / 64 * 64, '\0');
    const size_t offset = out.bytes.size();
    out.bytes += bytes;
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_int64_data();
    t.clear_double_data();
    t.clear_uint64_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto kv = [&](const char* k, const std::string& v) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    kv("location", location);
    kv("offset", std::to_string(offset));
    kv("length", std::to_string(bytes.size()));
    out.name = location;
  }
  return out;
}

}  // namespace qs
