// Data-parallel training over MPI (the C API of Open MPI): the world of this process, and one rank's
// side of a step (distributed.hpp).
//
// A step: every rank draws the step's global batch exactly as one process would (same seed, same
// order) and keeps its shard, a contiguous slice (shard_range). Its mean loss is weighted by its share
// of the global batch's target tokens, the quantity the single-process loss averages over, so that the
// ranks' gradients sum to the global batch's gradient. The parameters' gradients are summed in
// buckets of --bucket-mb MiB (parameters in reverse order of registration, roughly the order backward
// completes them); a bucket is sent (MPI_Iallreduce) as soon as every gradient in it is complete, so
// the sums travel while the rest of backward runs, and buckets are sent in index order on every rank
// (collectives must be issued in the same order everywhere). A gradient is complete when the tape
// entries that use its parameter have all run: the forward counts them (TapeObserver::recorded), the
// reverse walk counts them down (after_backward). A weight whose small uses are stacked into one GEMM
// (src/ops/matmul.cpp) gets its gradient in its last use's closure, which is what the count waits
// for; uses off the path to the loss never run, so whatever is still open when the walk and its
// at_backward_end work are over is completed then. Open MPI progresses non-blocking collectives
// only inside MPI calls, so the walk polls the oldest request after every entry.
//
// The deterministic mode gathers every rank's bucket (MPI_Iallgather) and sums in rank order:
// the same bits on every run and every rank whatever reduction algorithm MPI picks, at N/2 times the
// traffic of a ring all-reduce and N copies of each bucket in memory (docs/distributed.md).
//
// Not here: model parallelism, gradient compression, fault tolerance beyond exiting cleanly (a rank
// that dies ends the job; Open MPI's runtime takes the others down).
#include "src/train/distributed.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "kernels/balanced_split.hpp"
#include "src/train/train_internal.hpp"
#include "tapegrad/distributed.hpp"
#include "tapegrad/error.hpp"

#ifdef TAPEGRAD_HAVE_MPI
#include <mpi.h>
#endif

namespace tapegrad::train {

namespace {

// Set by Open MPI's launcher (or any PMIx one) in every process it starts.
bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK");
}

std::string mib(double m) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", m);
  return buf;
}

}  // namespace

std::pair<int64_t, int64_t> shard_range(int64_t batch, int rank, int ranks) {
  const kernels::Range r = kernels::balanced_split(batch, rank, ranks);
  return {r.begin, r.end};
}

std::string data_parallel_layout(const TrainOptions& o) {
  const World& w = world();
  if (o.batch_tokens > 0)
    throw CollectiveError("--batch-tokens " + std::to_string(o.batch_tokens) +
                          ": not in data-parallel runs (a batch of long examples may hold fewer sequences "
                          "than ranks); use --batch-size");
  if (o.batch_size < w.size)
    throw CollectiveError("--batch-size " + std::to_string(o.batch_size) + ": fewer sequences than the " +
                          std::to_string(w.size) +
                          " ranks of this data-parallel run (each rank needs at least one per step)");
  if (!(o.bucket_mb > 0 && o.bucket_mb <= 65536))
    throw CollectiveError("--bucket-mb " + mib(o.bucket_mb) + ": expected a number in (0, 65536]");
  const int64_t fewest = o.batch_size / w.size, most = fewest + (o.batch_size % w.size ? 1 : 0);
  std::ostringstream line;
  line << "data-parallel: " << w.size << (w.size == 1 ? " rank, " : " ranks, ") << fewest;
  if (most != fewest) line << "-" << most;
  line << " sequences per rank per step, buckets of " << mib(o.bucket_mb) << " MiB";
  if (o.deterministic_allreduce) line << ", summed in rank order (deterministic)";
  return line.str();
}

#ifdef TAPEGRAD_HAVE_MPI

bool mpi_available() {
  return true;
}

const World& world() {
  static const World w = [] {
    World w;
    if (!launched_by_mpirun()) return w;
    int provided = 0;
    // Only the main thread calls MPI (the kernels' OpenMP threads never do).
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size);
    w.launched = true;
    std::atexit([] {
      int done = 0;
      MPI_Finalized(&done);
      if (!done) MPI_Finalize();
    });
    return w;
  }();
  return w;
}

void abort_world(int code) {
  if (world().size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

namespace {

// FNV-1a over bytes; the parameters' hash goes a 64-bit word at a time (it runs over every weight).
uint64_t hash_bytes(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// One bucket of gradients: a flat buffer of consecutive parameters' gradients, summed as one message.
struct Bucket {
  std::vector<size_t> slots;  // parameters in it
  int64_t elements = 0;
  Tensor flat;          // [elements]: this rank's gradients in, the sum out
  Tensor gathered;      // deterministic mode: [ranks, elements]
  int64_t pending = 0;  // parameters whose gradient is not yet complete in this step
  MPI_Request request = MPI_REQUEST_NULL;
  bool launched = false, done = false;
};

// One parameter: where its gradient goes, and how many of its uses are still to run.
struct Slot {
  Tensor param;
  size_t bucket = 0;
  int64_t offset = 0;               // in the bucket, in elements
  int64_t uses = 0, remaining = 0;  // tape entries with it as an input: recorded, not yet run
  bool complete = false;
  bool used_anywhere = false;  // some rank's tape used it in this step (else it gets no gradient)
};

class MpiDataParallel final : public DataParallel, public GradientExchange {
 public:
  explicit MpiDataParallel(Session& s) : deterministic_(s.options.deterministic_allreduce) {
    const World& w = world();
    rank_ = w.rank, size_ = w.size;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    check_same_options(s);
    (void)data_parallel_layout(s.options);  // refuses an empty shard and a bad bucket size everywhere
    build_buckets(s.model->parameters(), s.options.bucket_mb);
    check_in_sync(*s.model, "at start-up (the ranks loaded different checkpoints?)");
    // Dropout: each rank draws its own masks (the same stream on every rank would repeat one mask
    // pattern across shards). Rank 0 keeps the model's stream, which is what checkpoints save.
    if (rank_ > 0) {
      const auto state = s.model->generator().state();
      s.model->generator() = Generator(state[0] ^ (0x9E3779B97F4A7C15ull * uint64_t(rank_)) ^ state[1]);
    }
  }
  ~MpiDataParallel() override {
    for (Bucket& b : buckets_)
      if (b.launched && !b.done) MPI_Wait(&b.request, MPI_STATUS_IGNORE);
    MPI_Comm_free(&comm_);
  }

  StepResult step(Session& s) override {
    const int64_t n = s.step + 1;
    const std::vector<data::Example> all = s.examples_for_step(n);
    global_tokens_ = s.batch_of(all).target_tokens();
    const auto [begin, end] = shard_range(int64_t(all.size()), rank_, size_);
    const data::Batch shard = s.batch_of(std::vector<data::Example>(all.begin() + begin, all.begin() + end));
    weight_ = double(shard.target_tokens()) / double(global_tokens_);
    begin_step();
    const StepResult r = train_step(*s.model, *s.optimizer, StepRecipe::from(s.options), shard, n, this);
    s.step = n;
    return r;
  }

  void check_in_sync(const models::Seq2Seq& model, const std::string& when) override {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const Tensor& p : model.parameters()) {
      const Tensor c = p.is_contiguous() ? p : p.clone();
      h = hash_bytes(bytes_of(c), size_t(c.numel() * elem_), h);
    }
    const std::vector<uint64_t> all = gather_words(h);
    for (int r = 1; r < size_; ++r)
      if (all[size_t(r)] != all[0])
        throw CollectiveError("data-parallel: the parameters of rank " + std::to_string(r) +
                              " differ from rank 0's " + when);
  }

  // ---- GradientExchange -------------------------------------------------------------------------

  int64_t global_tokens() const override { return global_tokens_; }
  double loss_weight() const override { return weight_; }

  double sum_loss(double shard_loss) override {
    // One message after forward: the weighted shard loss, and which parameters this rank's tape used.
    const size_t m = 1 + slots_.size();
    std::vector<double> mine(m), all(m * size_t(size_));
    mine[0] = shard_loss * weight_;
    for (size_t i = 0; i < slots_.size(); ++i) mine[1 + i] = slots_[i].uses > 0 ? 1 : 0;
    MPI_Allgather(mine.data(), int(m), MPI_DOUBLE, all.data(), int(m), MPI_DOUBLE, comm_);
    double loss = 0;
    for (int r = 0; r < size_; ++r) loss += all[size_t(r) * m];  // in rank order: the same on every rank
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].used_anywhere = false;
      for (int r = 0; r < size_; ++r) slots_[i].used_anywhere |= all[size_t(r) * m + 1 + i] != 0;
    }
    return loss;
  }

  void recorded(const Tape& tape, size_t index) override {
    for (const Tensor& in : tape.entries()[index].inputs)
      if (Slot* s = slot_of(in)) ++s->uses;
  }

  void before_backward(const Tape&, size_t, const Tensor&) override {
    if (walking_) return;
    walking_ = true;
    // Parameters this rank's tape never used have their (zero) contribution ready now.
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].remaining = slots_[i].uses;
      if (slots_[i].uses == 0) complete(i);
    }
  }

  void after_backward(const Tape& tape, size_t index) override {
    for (const Tensor& in : tape.entries()[index].inputs)
      if (Slot* s = slot_of(in); s && !s->complete && --s->remaining == 0)
        complete(size_t(s - slots_.data()));
    poll();
  }

  double finish_backward() override {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!slots_[i].complete) complete(i);  // off the path, or completed by at_backward_end's work
    const auto t0 = std::chrono::steady_clock::now();
    for (Bucket& b : buckets_) {
      if (!b.done) MPI_Wait(&b.request, MPI_STATUS_IGNORE), b.done = true;
      if (deterministic_) sum_in_rank_order(b);
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The sums become the gradients (a parameter no rank used keeps no gradient, as in one process).
    for (Slot& s : slots_) {
      if (!s.used_anywhere) continue;
      bool fresh = false;
      Tensor g = grad_buffer(s.param, &fresh);
      const Bucket& b = buckets_[s.bucket];
      const size_t bytes = size_t(s.param.numel() * elem_);
      std::memcpy(bytes_of(g), bytes_of(b.flat) + size_t(s.offset * elem_), bytes);
    }
    walking_ = false;
    return waited;
  }

 private:
  static unsigned char* bytes_of(const Tensor& t) {
    return t.dtype() == DType::f32 ? reinterpret_cast<unsigned char*>(t.data<float>())
                                   : reinterpret_cast<unsigned char*>(t.data<double>());
  }

  Slot* slot_of(const Tensor& t) {
    if (!t.defined() || !t.is_leaf()) return nullptr;
    auto it = slot_index_.find(t.impl());
    return it == slot_index_.end() ? nullptr : &slots_[it->second];
  }

  void check_same_options(const Session& s) {
    const std::string text = s.options.to_json() + "|bucket " + mib(s.options.bucket_mb) + "|deterministic " +
                             std::to_string(s.options.deterministic_allreduce) + "|step " +
                             std::to_string(s.step) + "|ranks " + std::to_string(size_);
    const std::vector<uint64_t> all = gather_words(hash_bytes(text.data(), text.size()));
    std::string differ;
    for (int r = 1; r < size_; ++r)
      if (all[size_t(r)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    if (!differ.empty())
      throw CollectiveError("data-parallel: rank" +
                            std::string(differ.find(',') == std::string::npos ? " " : "s ") + differ +
                            " started with other options than rank 0 (or resumed another step): "
                            "every rank must run the same command");
  }

  std::vector<uint64_t> gather_words(uint64_t word) {
    std::vector<uint64_t> all(size_t(size_), 0);
    MPI_Allgather(&word, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_);
    return all;
  }

  void build_buckets(const std::vector<Tensor>& params, double bucket_mb) {
    if (params.empty()) throw CollectiveError("data-parallel: the model has no parameters");
    dtype_ = params.front().dtype();
    for (const Tensor& p : params)
      if (p.dtype() != dtype_)
        throw CollectiveError("data-parallel: the parameters mix dtypes (" + std::string(dtype_name(dtype_)) +
                              " and " + dtype_name(p.dtype()) + ")");
    if (dtype_ != DType::f32 && dtype_ != DType::f64)
      throw CollectiveError("data-parallel: parameters of dtype " + std::string(dtype_name(dtype_)));
    elem_ = dtype_size(dtype_);
    mpi_type_ = dtype_ == DType::f32 ? MPI_FLOAT : MPI_DOUBLE;
    const int64_t limit = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / elem_);
    slots_.resize(params.size());
    // Reverse order of registration: the output side's parameters, whose gradients come first.
    for (size_t k = params.size(); k-- > 0;) {
      const size_t i = params.size() - 1 - k;
      Slot& s = slots_[i];
      s.param = params[k];
      slot_index_[s.param.impl()] = i;
      if (buckets_.empty() || buckets_.back().elements >= limit) buckets_.emplace_back();
      Bucket& b = buckets_.back();
      s.bucket = buckets_.size() - 1;
      s.offset = b.elements;
      b.slots.push_back(i);
      b.elements += s.param.numel();
    }
    for (Bucket& b : buckets_) {
      if (b.elements > INT32_MAX)
        throw CollectiveError("data-parallel: a gradient bucket exceeds 2^31 elements");
      b.flat = Tensor::empty({b.elements}, dtype_);
      if (deterministic_) b.gathered = Tensor::empty({int64_t(size_), b.elements}, dtype_);
    }
  }

  void begin_step() {
    walking_ = false;
    next_launch_ = 0;
    for (Slot& s : slots_) s.uses = s.remaining = 0, s.complete = false;
    for (Bucket& b : buckets_) b.pending = int64_t(b.slots.size()), b.launched = b.done = false;
  }

  // Parameter i's gradient is final on this rank: into its bucket, and send the buckets now complete.
  void complete(size_t i) {
    Slot& s = slots_[i];
    s.complete = true;
    Bucket& b = buckets_[s.bucket];
    unsigned char* dst = bytes_of(b.flat) + size_t(s.offset * elem_);
    const size_t bytes = size_t(s.param.numel() * elem_);
    const Tensor g = s.param.grad();
    if (g.defined()) {
      const Tensor c = g.is_contiguous() ? g : g.clone();
      std::memcpy(dst, bytes_of(c), bytes);
    } else {
      std::memset(dst, 0, bytes);  // 0.0 in both float formats
    }
    if (--b.pending > 0) return;
    // In index order on every rank, whatever order this rank completed them in.
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0)
      launch(buckets_[next_launch_++]);
  }

  void launch(Bucket& b) {
    const int n = int(b.elements);
    if (deterministic_)
      MPI_Iallgather(bytes_of(b.flat), n, mpi_type_, bytes_of(b.gathered), n, mpi_type_, comm_, &b.request);
    else
      MPI_Iallreduce(MPI_IN_PLACE, bytes_of(b.flat), n, mpi_type_, MPI_SUM, comm_, &b.request);
    b.launched = true;
  }

  // Lets the messages in flight advance (Open MPI moves them only inside MPI calls).
  void poll() {
    for (Bucket& b : buckets_) {
      if (!b.launched) return;
      if (b.done) continue;
      int flag = 0;
      MPI_Test(&b.request, &flag, MPI_STATUS_IGNORE);
      if (!flag) return;
      b.done = true;
    }
  }

  // flat = ((g_0 + g_1) + g_2) + ... from the gathered rows.
  void sum_in_rank_order(Bucket& b) const {
    const int64_t n = b.elements;
    auto sum = [&]<class T>() {
      const T* rows = b.gathered.data<T>();
      T* out = b.flat.data<T>();
      std::copy_n(rows, n, out);
      for (int r = 1; r < size_; ++r)
        for (int64_t i = 0; i < n; ++i) out[i] += rows[int64_t(r) * n + i];
    };
    if (dtype_ == DType::f32)
      sum.template operator()<float>();
    else
      sum.template operator()<double>();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool deterministic_ = false;
  DType dtype_ = DType::f32;
  int64_t elem_ = 4;
  MPI_Datatype mpi_type_ = MPI_FLOAT;
  std::vector<Slot> slots_;
  std::unordered_map<const TensorImpl*, size_t> slot_index_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool walking_ = false;
  int64_t global_tokens_ = 0;
  double weight_ = 1;
};

}  // namespace

std::unique_ptr<DataParallel> DataParallel::start(Session& session) {
  if (!world().launched) return nullptr;
  return std::make_unique<MpiDataParallel>(session);
}

#else  // built without MPI: one process only

namespace {
int launched_size() {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  return n ? std::atoi(n) : 1;
}
}  // namespace

bool mpi_available() {
  return false;
}

const World& world() {
  static const World w = [] {
    if (launched_by_mpirun() && launched_size() > 1)
      throw Error("data-parallel: launched by mpirun with " + std::to_string(launched_size()) +
                  " ranks, but this tapegrad was built without MPI (install libopenmpi-dev and reconfigure "
                  "the build)");
    return World{};
  }();
  return w;
}

void abort_world(int) {}

std::unique_ptr<DataParallel> DataParallel::start(Session&) {
  return nullptr;
}

#endif

}  // namespace tapegrad::train
