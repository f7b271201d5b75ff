// Runs a model in ONNX Runtime (onnxruntime-node) for the parity tests and benchmarks.
// usage: node ort_run.mjs MODEL IN_DIR OUT_DIR [--threads N] [--repeat R] [--profile PREFIX]
//   IN_DIR holds in_<i>.npy, one per model input in declaration order; outputs are written
//   to OUT_DIR/out_<i>.npy in the model's output order. With --repeat R, the run is timed
//   R more times and {"ms_median", "ms_min"} is printed as one JSON line. With --profile PREFIX, ORT's own
//   profiler is on (every run, warm-up included) and it writes its trace as PREFIX_<date>.json.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

process.env.ORT_DISABLE_TELEMETRY = '1';
const require = createRequire(import.meta.url);
const ortDir = process.env.QS_ORT_DIR || path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../.cache/ort');
const ort = require(path.join(ortDir, 'node_modules/onnxruntime-node'));

const DESCR = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array], '<i8': ['int64', BigInt64Array],
  '<i4': ['int32', Int32Array], '|i1': ['int8', Int8Array], '|u1': ['uint8', Uint8Array], '|b1': ['bool', Uint8Array],
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not an npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  if (!DESCR[descr]) throw new Error(`${file}: unsupported dtype ${descr}`);
  const [type, Ctor] = DESCR[descr];
  const off = start + hlen;
  const bytes = buf.buffer.slice(buf.byteOffset + off, buf.byteOffset + buf.length);
  let data = new Ctor(bytes);
  if (type === 'bool') data = Array.from(data, (v) => v !== 0);
  return new ort.Tensor(type, data, shape);
}

function writeNpy(file, tensor) {
  const map = { float32: '<f4', float64: '<f8', int64: '<i8', int32: '<i4', int8: '|i1', uint8: '|u1', bool: '|b1' };
  const descr = map[tensor.type];
  if (!descr) throw new Error(`output dtype ${tensor.type} not supported`);
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1; pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  let body;
  if (tensor.type === 'bool') body = Buffer.from(Uint8Array.from(tensor.data, (v) => (v ? 1 : 0)));
  else body = Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? Number(args[i + 1]) : def; };
const [modelPath, inDir, outDir] = args;
const threads = opt('--threads', 2);
const repeat = opt('--repeat', 0);
const profileAt = args.indexOf('--profile');
const profilePrefix = profileAt >= 0 ? args[profileAt + 1] : '';
const session = await ort.InferenceSession.create(modelPath, {
  intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential',
  ...(profilePrefix ? { enableProfiling: true, profileFilePrefix: profilePrefix } : {}),
});
const feeds = {};
session.inputNames.forEach((name, i) => { feeds[name] = readNpy(path.join(inDir, `in_${i}.npy`)); });
const results = await session.run(feeds);
if (outDir) {
  fs.mkdirSync(outDir, { recursive: true });
  session.outputNames.forEach((name, i) => writeNpy(path.join(outDir, `out_${i}.npy`), results[name]));
}
if (repeat > 0) {
  const ms = [];
  for (let r = 0; r < repeat; ++r) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const median = ms.length % 2 ? ms[(ms.length - 1) / 2] : (ms[ms.length / 2 - 1] + ms[ms.length / 2]) / 2;
  console.log(JSON.stringify({ ms_median: median, ms_min: ms[0], repeat, threads }));
}
if (profilePrefix) session.endProfiling();
