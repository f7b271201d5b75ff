// Writes the seed corpora of the fuzz targets: qs_fuzz_seeds OUT_DIR [MODELS_DIR]
//   OUT_DIR/model        tiny models built in code, plus "skeletons" of MODELS_DIR/*.onnx (the
//                        real graphs and attributes with every initializer cut to a few elements,
//                        so that they fit the fuzzer's -max_len)
//   OUT_DIR/npy          .npy in every dtype, fortran order, big-endian, v2/v3 headers; .npz
//                        stored and deflated (writeNpy/writeNpz and hand-made headers)
//   OUT_DIR/quant_files  quant_cfg.json (as `quantscope export` writes it, PPQ's minimal form)
//                        and calibration.cache files
//   OUT_DIR/image        small PNG, BMP and JPEG files (writeImage)
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/io/image.h"
#include "core/io/npy.h"
#include "tests/fuzz/fuzz_models.h"
#include "tests/support/onnx_builder.h"

namespace fs = std::filesystem;
using namespace qs;

namespace {

void put(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), (std::streamsize)bytes.size());
  if (!out) {
    std::cerr << "qs_fuzz_seeds: cannot write " << path << "\n";
    std::exit(1);
  }
}

void check(const Status& st) {
  if (!st) {
    std::cerr << "qs_fuzz_seeds: " << st.message() << "\n";
    std::exit(1);
  }
}

/// The real graph with each initializer shrunk to at most 4 elements per dim and 64 in all
/// (kept as raw data of the right size): keeps ops, attributes and topology, drops the weights.
std::string skeleton(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) return {};
  auto shrink = [](onnx::TensorProto& t) {
    int64_t numel = 1;
    for (int i = 0; i < t.dims_size(); ++i) {
      int64_t d = std::min<int64_t>(t.dims(i), numel * 4 > 64 ? 1 : 4);
      t.set_dims(i, d);
      numel *= d;
    }
    size_t esize = t.data_type() == onnx::TensorProto::INT64 || t.data_type() == onnx::TensorProto::DOUBLE ? 8
                   : t.data_type() == onnx::TensorProto::INT8 || t.data_type() == onnx::TensorProto::UINT8 ||
                           t.data_type() == onnx::TensorProto::BOOL
                       ? 1
                       : 4;
    std::string raw = t.has_raw_data() ? t.raw_data() : std::string();
    raw.resize((size_t)numel * esize, '\1');
    t.clear_float_data();
    t.clear_int64_data();
    t.clear_int32_data();
    t.clear_double_data();
    t.set_raw_data(raw);
  };
  auto* g = m.mutable_graph();
  for (auto& t : *g->mutable_initializer()) shrink(t);
  for (auto& n : *g->mutable_node())
    for (auto& a : *n.mutable_attribute())
      if (a.has_t()) shrink(*a.mutable_t());
  g->clear_value_info();
  return m.SerializeAsString();
}

std::string npyHeader(const std::string& dict, int major) {
  // Magic, version, header length (2 bytes for v1, 4 for v2/v3), dict padded to 64 with '\n'.
  size_t lenBytes = major == 1 ? 2 : 4;
  size_t total = 6 + 2 + lenBytes + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  std::string h = dict + std::string(pad, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += (char)major;
  out += '\0';
  for (size_t i = 0; i < lenBytes; ++i) out += (char)((h.size() >> (8 * i)) & 0xff);
  return out + h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: qs_fuzz_seeds OUT_DIR [MODELS_DIR]\n";
    return 2;
  }
  fs::path out = argv[1];
  for (const char* d : {"model", "npy", "quant_files", "image", "project"}) fs::create_directories(out / d);

  // ---- models
  for (const auto& [name, bytes] : fuzz::seedModels()) put(out / "model" / name, bytes);
  if (argc > 2 && fs::is_directory(argv[2])) {
    for (const auto& e : fs::directory_iterator(argv[2])) {
      if (e.path().extension() != ".onnx") continue;
      std::string s = skeleton(e.path().string());
      if (!s.empty()) put(out / "model" / ("skeleton_" + e.path().filename().string()), s);
    }
  }

  // ---- npy / npz
  std::vector<NamedTensor> all;
  {
    std::vector<float> f{0.f, -1.5f, 2.25f, 1e-8f, 3e7f, -0.f};
    all.push_back({"f32", Tensor::fromVector<float>(f, {2, 3})});
    all.push_back({"f64", Tensor::fromVector<double>({1.0, -2.0, 3.5}, {3})});
    all.push_back({"i8", Tensor::fromVector<int8_t>({-128, 0, 127, 5}, {2, 2})});
    all.push_back({"u8", Tensor::fromVector<uint8_t>({0, 255, 7}, {3, 1})});
    all.push_back({"i16", Tensor::fromVector<int16_t>({-300, 300}, {2})});
    all.push_back({"u16", Tensor::fromVector<uint16_t>({1, 65535}, {2})});
    all.push_back({"i32", Tensor::fromVector<int32_t>({-70000, 70000}, {1, 2})});
    all.push_back({"u32", Tensor::fromVector<uint32_t>({1u, 4000000000u}, {2})});
    all.push_back({"i64", Tensor::fromVector<int64_t>({-5, int64_t(1) << 40}, {2})});
    all.push_back({"u64", Tensor::fromVector<uint64_t>({7, uint64_t(1) << 63}, {2})});
    all.push_back({"b", Tensor::fromVector<bool>({true, false, true}, {3})});
    all.push_back({"scalar", Tensor::scalar<float>(42.f)});
    all.push_back({"empty", Tensor(DType::Float, {0, 3})});
    Tensor h(DType::Float16, {2});
    h.data<uint16_t>()[0] = 0x3c00;  // 1.0
    h.data<uint16_t>()[1] = 0xc000;  // -2.0
    all.push_back({"f16", h});
  }
  for (const auto& nt : all) check(writeNpy((out / "npy" / (nt.name + ".npy")).string(), nt.tensor));
  check(writeNpz((out / "npy" / "stored.npz").string(), {all[0], all[2], all[8]}, false));
  check(writeNpz((out / "npy" / "deflated.npz").string(), {all[0], all[3], all[10]}, true));
  {
    std::string data4(12, '\0');
    float v[3] = {1.f, 2.f, 3.f};
    std::memcpy(data4.data(), v, 12);
    std::string be = "\x3f\x80\0\0\x40\0\0\0\x40\x40\0\0";
    be.resize(12);
    put(out / "npy" / "big_endian.npy", npyHeader("{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", 1) + be);
    std::string f6(24, '\0');
    float fv[6] = {1, 2, 3, 4, 5, 6};
    std::memcpy(f6.data(), fv, 24);
    put(out / "npy" / "fortran.npy", npyHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1) + f6);
    put(out / "npy" / "v2.npy", npyHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 2) + data4);
    put(out / "npy" / "v3.npy", npyHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 3) + data4);
  }

  // ---- quant_cfg.json and calibration.cache (the formats `quantscope export` writes; names
  // match fuzz::convReluConvModel(), which the quant-files fuzzer matches configs against)
  put(out / "quant_files" / "quant_cfg.json", R"J({
  "act_quant_info": {"x": 0.9999779462814331, "r0": 4.357434272766113},
  "quantscope": {
    "tool": "quantscope", "version": "0.1.0",
    "model": {"file": "conv_relu_conv.onnx", "fnv1a64": "2d42a4e9bfd74716"},
    "mode": "int8",
    "calibration": {"method": "entropy", "percentile": 99.99, "bins": 2048, "start_bin": 128,
                    "entropy_replace_bin0": true, "samples": 2, "data": "calib.npz"},
    "config": {"nodes_to_exclude": ["conv1"], "nodes_to_quantize": [], "op_types_to_exclude": [],
               "op_types_to_quantize": []},
    "export": {"dq_only": true, "use_external_data_format": false},
    "weights": [{"node": "conv0", "input": 1, "tensor": "w0", "axis": 0, "amax": [0.25, 0.5, 0.75, 1.0]},
                {"node": "conv1", "input": 1, "tensor": "w1", "axis": 0, "amax": [0.375, 0.375]}],
    "nodes": [{"name": "conv0", "op_type": "Conv", "quantizable": true, "quantized": true},
              {"name": "relu0", "op_type": "Relu", "quantizable": false, "quantized": false,
               "reason": "Relu: fuses into the producing Conv (TensorRT)"},
              {"name": "conv1", "op_type": "Conv", "quantizable": true, "quantized": false}]
  }
}
)J");
  put(out / "quant_files" / "quant_cfg_fp8.json", R"J({"act_quant_info": {"x": 1.5, "c0": 2.0, "r0": 2.0},
"quantscope": {"mode": "fp8", "calibration": {"method": "percentile", "percentile": 99.9},
 "config": {"nodes_to_exclude": ["conv[0-9]+$", "relu.*"], "op_types_to_quantize": ["Conv"]},
 "nodes": [{"name": "conv0", "quantizable": true, "quantized": false},
           {"name": "relu0", "quantizable": false, "quantized": false},
           {"name": "conv1", "quantizable": true, "quantized": true}]}}
)J");
  // Numbers of the wrong kind where integers belong (a float 1e30 once reached a static_cast to int).
  put(out / "quant_files" / "quant_cfg_numbers.json", R"J({"act_quant_info": {"x": 3.4e38},
"quantscope": {"calibration": {"bins": 1e30, "start_bin": -1, "samples": 18446744073709551615},
 "weights": [{"node": "conv0", "input": 1.5, "tensor": "w0", "axis": -2147483649, "amax": [1e300]}]}}
)J");
  put(out / "quant_files" / "ppq_quant_cfg.json", R"J({"act_quant_info": {"x": 1.0, "c0": 3.25, "y": 0.5}})J");
  put(out / "quant_files" / "calibration.cache",
      "TRT-8601-EntropyCalibration2\nx: 3c01014a\nc0: 3d0c892c\nr0: 3d004f7a\ny: 3c9471c6\n");
  put(out / "quant_files" / "calibration_minmax.cache",
      "TRT-8601-MinMaxCalibration\r\nx: 3C01014A\r\nname: with: colons: 3bf47c43\r\n\r\n");

  // ---- images
  Image img;
  img.width = 7;
  img.height = 5;
  img.pixels.resize((size_t)img.width * img.height * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = (uint8_t)(i * 37 % 251);
  for (const char* name : {"rgb.png", "rgb.bmp", "rgb.jpg"}) check(writeImage((out / "image" / name).string(), img));
  // ---- project files (.qsproj), as the workbench writes them (ui/project_file.cpp)
  put(out / "project" / "det.qsproj", R"J({
    "calibrated": true,
    "calibration": {
        "bgr": false, "data": "images", "height": 448, "mean": [0.485, 0.456, 0.406], "method": "entropy",
        "mode": "int8", "nhwc": false, "percentile": 99.99, "samples": 8, "scale": 0.00392156862745098,
        "std": [0.229, 0.224, 0.225], "width": 640
    },
    "excluded_nodes": ["p2o.Conv.0", "p2o.Conv.58"],
    "model": "../models/ch_PP-OCRv4_det_infer.onnx",
    "quantized_nodes": ["p2o.Add.3"],
    "quantscope_project": 1,
    "view": {"colouring": "sensitivity", "threshold_db": 8}
})J");
  put(out / "project" / "minimal.qsproj", R"J({"quantscope_project": 1, "model": "/abs/m.onnx"})J");
  put(out / "project" / "random.qsproj",
      R"J({"quantscope_project": 1, "model": "m.onnx", "calibration": {"data": "", "method": "percentile",
      "percentile": 99.999, "mode": "fp8", "samples": -1}, "calibrated": false})J");
  std::cout << "qs_fuzz_seeds: wrote " << out.string() << "/{model,npy,quant_files,image,project}\n";
  return 0;
}
