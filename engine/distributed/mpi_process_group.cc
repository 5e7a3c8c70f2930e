// MpiProcessGroup: MPI collectives on the group's communication thread (design note "MPI in
// threads" in mpi_process_group.h).
#include "engine/distributed/mpi_process_group.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "engine/core/error.h"
#include "engine/distributed/reduce_ops.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace dpe {
namespace distributed {

namespace {

// Open MPI keeps blocks it allocates in MPI calls (its components, operator tables) past
// MPI_Finalize, and LeakSanitizer would fail every MPI process at exit for them: what MPI
// allocates is MPI's, so LeakSanitizer ignores the allocations of the thread inside an MPI call.
// (Open MPI's own threads allocate too, in code LeakSanitizer cannot unwind: the ranks that
// mpirun starts in sanitized test runs go without leak detection, see tests/tools/run_tool.h.)
struct IgnoreMpiAllocations {
#if defined(__SANITIZE_ADDRESS__)
  IgnoreMpiAllocations() { __lsan_disable(); }
  ~IgnoreMpiAllocations() { __lsan_enable(); }
#else
  IgnoreMpiAllocations() {}  // user-provided: a guard variable is not "unused"
#endif
};

// The largest element count one MPI call takes (its counts are int); bigger tensors go in pieces.
constexpr int64_t kMaxCount = INT_MAX;

std::once_flag g_init_once;
int g_thread_level = MPI_THREAD_SINGLE;
std::mutex g_serial_mu;  // every MPI call, when the library is not MPI_THREAD_MULTIPLE

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// The live groups, so that MPI is finalised only after their communication threads have
// stopped: a group held until static destruction (the default group) would otherwise still have
// its thread, and Open MPI's finalisation tears down what that thread's frees rely on. Leaked on
// purpose: it must outlive every static destructor.
std::mutex& groups_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::set<MpiProcessGroup*>& live_groups() {
  static auto* groups = new std::set<MpiProcessGroup*>;
  return *groups;
}

}  // namespace

void MpiProcessGroup::finalize_at_exit() {
  {
    std::lock_guard<std::mutex> lock(groups_mu());
    for (MpiProcessGroup* g : live_groups()) g->release();
  }
  const IgnoreMpiAllocations ignore;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

namespace {

void init_mpi_once() {
  std::call_once(g_init_once, [] {
    const IgnoreMpiAllocations ignore;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&g_thread_level);
    } else {
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &g_thread_level);
      DPE_CHECK(rc == MPI_SUCCESS,
                "init_process_group (mpi): MPI_Init_thread failed: " << mpi_error_string(rc));
      std::atexit(MpiProcessGroup::finalize_at_exit);
    }
    DPE_CHECK(g_thread_level >= MPI_THREAD_SERIALIZED,
              "init_process_group (mpi): the MPI library grants thread level "
                  << g_thread_level
                  << ", below MPI_THREAD_SERIALIZED: dpe calls MPI from a communication thread");
  });
}

// Runs one MPI call, under the process-wide lock when the library is not thread-multiple.
template <typename F>
int call(F&& f) {
  const IgnoreMpiAllocations ignore;
  if (g_thread_level >= MPI_THREAD_MULTIPLE) return f();
  std::lock_guard<std::mutex> lock(g_serial_mu);
  return f();
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
    default:
      return MPI_SUM;  // kAvg: a sum, divided afterwards
  }
}

// MPI has no bfloat16 or float16 type: their all-reduce sends 2-byte words (MPI_UINT16_T) and
// reduces them with a user-defined op of reduce_ops.h, one per dtype and op, made on first use
// (after MPI_Init) and kept for the process's life.
template <class T, ReduceOp Op>
void mpi_reduce_with(void* in, void* inout, int* len, MPI_Datatype*) {
  T* io = static_cast<T*>(inout);
  reduce_elements(Op, io, static_cast<const T*>(in), io, static_cast<size_t>(*len));
}

template <class T>
MPI_Op mpi_16bit_op(ReduceOp op) {
  static MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
  static std::once_flag once;
  std::call_once(once, [] {
    call([] { return MPI_Op_create(&mpi_reduce_with<T, ReduceOp::kSum>, 1, &ops[0]); });
    call([] { return MPI_Op_create(&mpi_reduce_with<T, ReduceOp::kMax>, 1, &ops[1]); });
    call([] { return MPI_Op_create(&mpi_reduce_with<T, ReduceOp::kMin>, 1, &ops[2]); });
  });
  return op == ReduceOp::kMax ? ops[1] : op == ReduceOp::kMin ? ops[2] : ops[0];
}

// The MPI type and op of an all-reduce of `dtype`.
std::pair<MPI_Datatype, MPI_Op> mpi_type_and_op(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32: return {MPI_FLOAT, mpi_op(op)};
    case DType::kInt64: return {MPI_INT64_T, mpi_op(op)};
    case DType::kBFloat16: return {MPI_UINT16_T, mpi_16bit_op<BFloat16>(op)};
    case DType::kFloat16: return {MPI_UINT16_T, mpi_16bit_op<Float16>(op)};
  }
  return {MPI_FLOAT, mpi_op(op)};
}

}  // namespace

struct MpiProcessGroup::Comm {
  MPI_Comm comm = MPI_COMM_NULL;
};

void MpiProcessGroup::check(int rc, const char* op) const {
  DPE_CHECK(rc == MPI_SUCCESS,
            "mpi " << op << " (rank " << rank_ << " of " << size_ << "): " << mpi_error_string(rc));
}

void MpiProcessGroup::abort_job(int code) {
  // Not under g_serial_mu: the thread blocked in a collective holds it where the library is not
  // thread-multiple, and an abort must not wait for that collective.
  MPI_Abort(MPI_COMM_WORLD, code);
  ::_exit(code);  // MPI_Abort does not return; should it, the process ends anyway
}

int MpiProcessGroup::world_rank() {
  init_mpi_once();
  int rank = 0;
  call([&] { return MPI_Comm_rank(MPI_COMM_WORLD, &rank); });
  return rank;
}

int MpiProcessGroup::world_size() {
  init_mpi_once();
  int size = 0;
  call([&] { return MPI_Comm_size(MPI_COMM_WORLD, &size); });
  return size;
}

MpiProcessGroup::MpiProcessGroup()
    : ProcessGroup(world_rank(), world_size()), comm_(std::make_unique<Comm>()) {
  // A communicator of its own: several groups may run collectives at once without mixing them.
  check(call([&] { return MPI_Comm_dup(MPI_COMM_WORLD, &comm_->comm); }), "comm_dup");
  // Error codes instead of the default abort, so a misuse surfaces as a dpe::Error.
  call([&] { return MPI_Comm_set_errhandler(comm_->comm, MPI_ERRORS_RETURN); });
  try {
    // The ranks on this machine: MPI's shared-memory split of the group (collective).
    MPI_Comm node = MPI_COMM_NULL;
    check(call([&] {
            return MPI_Comm_split_type(comm_->comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL,
                                       &node);
          }),
          "comm_split_type");
    const int rc = call([&] { return MPI_Comm_size(node, &local_size_); });
    call([&] { return MPI_Comm_free(&node); });
    check(rc, "comm_size");
  } catch (...) {
    call([&] { return MPI_Comm_free(&comm_->comm); });
    throw;
  }
  start_communication();
  std::lock_guard<std::mutex> lock(groups_mu());
  live_groups().insert(this);
}

MpiProcessGroup::~MpiProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(groups_mu());
    live_groups().erase(this);
  }
  release();
}

void MpiProcessGroup::release() {
  stop_communication();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_->comm != MPI_COMM_NULL) {
    call([&] { return MPI_Comm_free(&comm_->comm); });
  }
  comm_->comm = MPI_COMM_NULL;
}

void MpiProcessGroup::run_all_reduce(Tensor& tensor, ReduceOp op) {
  const int64_t n = tensor.numel();
  if (n == 0) return;
  const size_t elem = dtype_size(tensor.dtype());
  char* data = static_cast<char*>(tensor.raw_data());
  if (size_ > 1) {
    const auto [type, reduce] = mpi_type_and_op(tensor.dtype(), op);
    for (int64_t at = 0; at < n; at += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, n - at));
      check(call([&] {
              return MPI_Allreduce(MPI_IN_PLACE, data + at * elem, count, type, reduce,
                                   comm_->comm);
            }),
            "all_reduce");
    }
  }
  if (op == ReduceOp::kAvg) divide_by_size(tensor);
}

void MpiProcessGroup::run_broadcast(Tensor& tensor, int root) {
  const int64_t bytes = static_cast<int64_t>(tensor.nbytes());
  if (size_ == 1 || bytes == 0) return;
  char* data = static_cast<char*>(tensor.raw_data());
  for (int64_t at = 0; at < bytes; at += kMaxCount) {
    const int count = static_cast<int>(std::min(kMaxCount, bytes - at));
    check(call([&] { return MPI_Bcast(data + at, count, MPI_BYTE, root, comm_->comm); }),
          "broadcast");
  }
}

void MpiProcessGroup::run_all_gather(const Tensor& input, Tensor& gathered) {
  const int64_t bytes = static_cast<int64_t>(input.nbytes());
  if (bytes == 0) return;
  if (size_ == 1) {
    std::memcpy(gathered.raw_data(), input.raw_data(), static_cast<size_t>(bytes));
    return;
  }
  DPE_CHECK(bytes <= kMaxCount, "mpi all_gather (rank " << rank_ << " of " << size_
                                                        << "): " << bytes
                                                        << " bytes per rank, more than one MPI "
                                                           "call takes (2 GiB)");
  check(call([&] {
          return MPI_Allgather(input.raw_data(), static_cast<int>(bytes), MPI_BYTE,
                               gathered.raw_data(), static_cast<int>(bytes), MPI_BYTE, comm_->comm);
        }),
        "all_gather");
}

void MpiProcessGroup::run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  const int64_t n = output.numel();
  if (n == 0) return;
  if (size_ == 1) {
    output.copy_(input.view(output.shape()));
    return;
  }
  DPE_CHECK(n <= kMaxCount, "mpi reduce_scatter (rank " << rank_ << " of " << size_ << "): " << n
                                                        << " elements per rank, more than one MPI "
                                                           "call takes");
  check(call([&] {
          return MPI_Reduce_scatter_block(input.raw_data(), output.raw_data(),
                                          static_cast<int>(n), MPI_FLOAT, mpi_op(op),
                                          comm_->comm);
        }),
        "reduce_scatter");
  if (op == ReduceOp::kAvg) divide_by_size(output);
}

void MpiProcessGroup::run_barrier() {
  if (size_ == 1) return;
  check(call([&] { return MPI_Barrier(comm_->comm); }), "barrier");
}

}  // namespace distributed
}  // namespace dpe
