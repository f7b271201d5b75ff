#include "core/onnx/shape_inference_guard.h"

#include <fcntl.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/shape_inference/implementation.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace qs {

namespace {

// The input whose dims beyond the first two give the kernel, for the ops whose 1.12 inference
// (convPoolShapeInference, convTransposeShapeInference) takes kernel_shape from it when the
// attribute is absent: the kernel then has rank(W) - 2 entries while dilations, strides and the
// input's dims are indexed by it with rank(X) - 2 entries (a SEGV found by fuzz_model).
int kernelInput(const std::string& op) {
  if (op == "Conv" || op == "ConvInteger" || op == "ConvTranspose") return 1;
  if (op == "QLinearConv") return 3;
  return -1;
}

int rankOf(onnx::InferenceContext& ctx, size_t input) {
  if (input >= ctx.getNumInputs()) return -1;
  const onnx::TypeProto* t = ctx.getInputType(input);
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return -1;
  return t->tensor_type().shape().dim_size();
}

onnx::InferenceFunction guarded(const std::string& op, onnx::InferenceFunction inner) {
  const int w = kernelInput(op);
  return [op, w, inner = std::move(inner)](onnx::InferenceContext& ctx) {
    const int xRank = rankOf(ctx, 0);
    const int wRank = rankOf(ctx, (size_t)w);
    if (xRank >= 0 && wRank >= 0 && xRank != wRank) {
      fail_shape_inference(op, ": the input has rank ", xRank, " but the weight has rank ", wRank);
    }
    inner(ctx);
  };
}

class GuardedRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, const int maxInclusiveVersion,
                                  const std::string& domain) const override {
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Instance()->GetSchema(key, maxInclusiveVersion, domain);
    if (!s || !s->has_type_and_shape_inference_function() || kernelInput(key) < 0) return s;
    std::lock_guard<std::mutex> lock(m_mutex);
    auto& copy = m_copies[s];
    if (!copy) {
      copy = std::make_unique<onnx::OpSchema>(*s);
      copy->TypeAndShapeInferenceFunction(guarded(key, s->GetTypeAndShapeInferenceFunction()));
    }
    return copy.get();
  }

 private:
  mutable std::mutex m_mutex;
  mutable std::map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> m_copies;
};

// The child: inference, then the graph's value_info and outputs on `fd`. Never returns; _exit
// skips the parent's atexit handlers (and a sanitizer's leak check of the parent's heap).
[[noreturn]] void inferInChild(onnx::ModelProto& proto, int fd) {
  // A crash is the child's own death by signal: no sanitizer or fuzzer handler (they would report
  // the parent's input as a crash), no core file, and no output on the parent's terminal.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) ::signal(sig, SIG_DFL);
  struct rlimit noCore = {0, 0};
  ::setrlimit(RLIMIT_CORE, &noCore);
  int devNull = ::open("/dev/null", O_WRONLY);
  if (devNull >= 0) {
    ::dup2(devNull, 1);
    ::dup2(devNull, 2);
  }
  int code = 0;
  try {
    onnx::shape_inference::InferShapes(proto, guardedSchemaRegistry());
    onnx::GraphProto inferred;
    *inferred.mutable_value_info() = proto.graph().value_info();
    *inferred.mutable_output() = proto.graph().output();
    std::string bytes;
    if (!inferred.SerializeToString(&bytes)) ::_exit(3);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(4);
      done += (size_t)n;
    }
  } catch (const std::exception&) {
    code = 2;  // an inference error: shapes then come from execution
  } catch (...) {
    code = 2;
  }
  ::_exit(code);
}

}  // namespace

const onnx::ISchemaRegistry* guardedSchemaRegistry() {
  static const GuardedRegistry registry;
  return &registry;
}

bool inferShapesIsolated(onnx::ModelProto& proto, int timeoutMs, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return false;
  };
  // Build ONNX's schema table and our registry here, once per process, rather than in every child
  // (where a static's first use could also wait on a lock another of our threads held at the fork).
  (void)onnx::OpSchemaRegistry::Instance()->GetSchema("Conv", 11, "");
  (void)guardedSchemaRegistry();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return say(std::string("pipe failed: ") + std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return say(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    inferInChild(proto, fds[1]);
  }
  ::close(fds[1]);
  std::string bytes;
  bool timedOut = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  char buf[65536];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timedOut = true;
      break;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, (int)left.count());
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      timedOut = true;
      break;
    }
    if (r < 0) break;
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the child exited or closed its end
    bytes.append(buf, (size_t)n);
  }
  ::close(fds[0]);
  if (timedOut) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) return say("timed out after " + std::to_string(timeoutMs) + " ms");
  if (WIFSIGNALED(status)) {
    const char* abbrev = ::sigabbrev_np(WTERMSIG(status));  // not strsignal: that one follows the locale
    return say("crashed (signal " + (abbrev ? "SIG" + std::string(abbrev) : std::to_string(WTERMSIG(status))) + ")");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return say(WIFEXITED(status) && WEXITSTATUS(status) == 2 ? "failed (an inference error)"
                                                              : "failed (exit " + std::to_string(WEXITSTATUS(status)) + ")");
  }
  onnx::GraphProto inferred;
  if (!inferred.ParseFromString(bytes)) return say("sent back an unreadable result");
  if (inferred.output_size() != proto.graph().output_size()) return say("changed the graph's outputs");
  *proto.mutable_graph()->mutable_value_info() = std::move(*inferred.mutable_value_info());
  *proto.mutable_graph()->mutable_output() = std::move(*inferred.mutable_output());
  return true;
}

}  // namespace qs
