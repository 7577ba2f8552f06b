#include "runner/cuda/nccl_group.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <set>
#include <string>

#include "runner/cuda/cuda_check.h"
#include "runner/parallel/group_aborted.h"
#include "util/error.h"

namespace moeserve::cuda {

namespace {

// The NCCL entry points a group uses, resolved from libnccl.so.2 once per process.
struct NcclLibrary {
  decltype(&::ncclCommInitAll) comm_init_all = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;

  static const NcclLibrary& get() {
    static const NcclLibrary library = open();
    return library;
  }

 private:
  static NcclLibrary open() {
    void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    MOESERVE_CHECK(handle != nullptr,
                   "several GPUs need NCCL: libnccl.so.2 could not be opened ({}); put its directory on "
                   "LD_LIBRARY_PATH (pip's nvidia-nccl keeps it in site-packages/nvidia/nccl/lib)",
                   dlerror());
    NcclLibrary library;
    resolve(handle, "ncclCommInitAll", library.comm_init_all);
    resolve(handle, "ncclCommDestroy", library.comm_destroy);
    resolve(handle, "ncclCommAbort", library.comm_abort);
    resolve(handle, "ncclAllReduce", library.all_reduce);
    resolve(handle, "ncclAllGather", library.all_gather);
    resolve(handle, "ncclGetErrorString", library.error_string);
    return library;
  }
  template <typename Function>
  static void resolve(void* handle, const char* name, Function& function) {
    function = reinterpret_cast<Function>(dlsym(handle, name));
    MOESERVE_CHECK(function != nullptr, "libnccl.so.2 has no {}: NCCL 2.x is needed", name);
  }
};

void check_nccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  fail("{} failed: {}", call, NcclLibrary::get().error_string(result));
}

class NcclRank : public Communicator {
 public:
  NcclRank(ncclComm_t comm, cudaStream_t stream, int rank, int size)
      : comm_(comm), stream_(stream), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(std::span<float> data) override {
    check_aborted();
    check_nccl(NcclLibrary::get().all_reduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm_,
                                             stream_),
               "ncclAllReduce");
  }
  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    MOESERVE_CHECK(all.size() == mine.size() * static_cast<size_t>(size_),
                   "all_gather of {} bytes a rank over {} ranks into {} bytes", mine.size(), size_, all.size());
    check_aborted();
    check_nccl(NcclLibrary::get().all_gather(mine.data(), all.data(), mine.size(), ncclUint8, comm_, stream_),
               "ncclAllGather");
  }
  // ncclCommAbort makes the other ranks' pending and later collectives return with an error instead of waiting.
  void abort(const std::string& why) override {
    if (!aborted_.empty()) return;
    aborted_ = why.empty() ? "aborted" : why;
    NcclLibrary::get().comm_abort(comm_);
    comm_ = nullptr;
  }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  void use_stream(cudaStream_t stream) { stream_ = stream; }

 private:
  void check_aborted() const {
    if (!aborted_.empty()) throw GroupAborted(aborted_);
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_;
  std::string aborted_;
};

}  // namespace

struct NcclGroup::State {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  std::vector<std::unique_ptr<NcclRank>> ranks;
};

NcclGroup::NcclGroup(const std::vector<int>& devices) : state_(std::make_unique<State>()) {
  MOESERVE_CHECK(!devices.empty(), "an NCCL group needs at least one GPU");
  MOESERVE_CHECK(std::set<int>(devices.begin(), devices.end()).size() == devices.size(),
                 "an NCCL group takes each GPU once (NCCL runs one rank a GPU)");
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const NcclLibrary& nccl = NcclLibrary::get();
  for (int device : devices) select_cuda_device(device);
  std::vector<ncclComm_t> comms(devices.size());
  const int n = static_cast<int>(devices.size());
  check_nccl(nccl.comm_init_all(comms.data(), n, devices.data()), "ncclCommInitAll");
  state_->devices = devices;
  for (int r = 0; r < n; ++r) {
    MOESERVE_CUDA_CHECK(cudaSetDevice(devices[r]));
    cudaStream_t stream = nullptr;
    MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    state_->streams.push_back(stream);
    state_->ranks.push_back(std::make_unique<NcclRank>(comms[r], stream, r, n));
  }
}

NcclGroup::~NcclGroup() {
  const NcclLibrary& nccl = NcclLibrary::get();
  for (size_t r = 0; r < state_->ranks.size(); ++r) {
    cudaSetDevice(state_->devices[r]);
    if (state_->ranks[r]->comm() != nullptr) nccl.comm_destroy(state_->ranks[r]->comm());
    cudaStreamDestroy(state_->streams[r]);
  }
}

int NcclGroup::size() const { return static_cast<int>(state_->ranks.size()); }

Communicator& NcclGroup::rank(int r) {
  MOESERVE_CHECK(r >= 0 && r < size(), "rank {} of an NCCL group of {}", r, size());
  return *state_->ranks[r];
}

cudaStream_t NcclGroup::stream(int r) const {
  MOESERVE_CHECK(r >= 0 && r < size(), "rank {} of an NCCL group of {}", r, size());
  return state_->ranks[r]->stream();
}

void NcclGroup::use_stream(int r, cudaStream_t stream) {
  MOESERVE_CHECK(r >= 0 && r < size(), "rank {} of an NCCL group of {}", r, size());
  state_->ranks[r]->use_stream(stream);
}
int NcclGroup::device(int r) const { return state_->devices.at(r); }

}  // namespace moeserve::cuda
