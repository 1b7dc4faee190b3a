#include "engine/loaded_model.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "backend/cpu_device/cpu_device.h"
#ifdef TERN_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#endif
#include "base/progress_bar.h"
#include "config/hf_model.h"
#include "config/tokenizer_spec.h"
#include "engine/tp_ranks.h"

namespace tern {
namespace {

// Memory kept free beside the weights (and, on the GPU, the KV cache) for the forward's
// activations, cuBLAS's workspace and the dequantized prefill tiles; prefill_chunk_tokens sizes
// the GPU's prefill chunk to three quarters of it.
constexpr uint64_t kWorkBytes = uint64_t{1} << 30;

// Reads every page of the weights once so the first request does not pay for page faults, and
// shows progress while doing it (a cold 10 GB file takes a while).
void prefetch(const GgufFile& file, bool progress) {
  ProgressBar bar("loading " + file.paths()[0].substr(file.paths()[0].rfind('/') + 1),
                  progress ? file.tensor_bytes() : 0);
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  for (const auto& t : file.tensors()) {
    for (uint64_t i = 0; i < t.size_bytes; i += 4096) sink = static_cast<uint8_t>(sink ^ t.data[i]);
    done += t.size_bytes;
    if (progress) bar.update(done);
  }
  if (progress) bar.finish();
}

// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    uint64_t kb = 0;
    in >> kb;
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(64, '\n');
  }
  return 0;
}

// What agents need: the model's whole context, unless the KV cache for it (times the parallel
// sequences) would not fit in the memory left beside the weights (`available` bytes, of which
// `reserve` stay free); never below 2,048 tokens.
int64_t default_context(const LoadedModel& m, TensorType kv_type, int64_t sequences,
                        uint64_t available, uint64_t reserve) {
  const ModelShape& s = m.model->shape();
  const auto& info = tensor_type_info(kv_type);
  const double bytes_per_token =
      static_cast<double>(s.layers * s.cached_kv_heads() * s.head_dim * 2) * info.block_bytes /
      info.block_elements;
  int64_t fit = s.context_length;
  if (available > reserve && bytes_per_token > 0) {
    fit = static_cast<int64_t>(0.9 * static_cast<double>(available - reserve) /
                               (bytes_per_token * static_cast<double>(sequences)));
  } else if (available != 0) {
    fit = 0;
  }
  const int64_t context = std::min(s.context_length, fit) / 256 * 256;
  return std::max<int64_t>(std::min<int64_t>(s.context_length, 2048), context);
}

#ifdef TERN_HAVE_CUDA
// A CudaDevice for "cuda" or "cuda:N", after checking that the weights fit the GPU's free memory
// with room to work.
Result<void> make_cuda_device(LoadedModel& m, const std::string& device) {
  int ordinal = 0;
  if (device.starts_with("cuda:")) {
    const std::string n = device.substr(5);
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 3)
      return make_error("device '{}': expected cuda:N with N a GPU number", device);
    ordinal = std::stoi(n);
  }
  auto info = cuda_device_info(ordinal);
  if (!info) return info.error();
  const uint64_t weights = m.file.tensor_bytes();
  const uint64_t need = weights + kWorkBytes;
  if (need > info->free_bytes) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    return make_error(
        "{} does not fit on {} (GPU {}): it needs {:.2f} GiB ({:.2f} GiB of weights + 1 GiB to "
        "work in), and {:.2f} GiB of its {:.2f} GiB are free",
        m.path, info->name, ordinal, static_cast<double>(need) / kGiB,
        static_cast<double>(weights) / kGiB, static_cast<double>(info->free_bytes) / kGiB,
        static_cast<double>(info->total_bytes) / kGiB);
  }
  auto d = CudaDevice::create(ordinal);
  if (!d) return d.error();
  m.device = std::move(*d);
  return {};
}
#endif

// Whether the processes mpirun started (none: not under mpirun) fit --tp.
Result<void> check_launch(const LaunchedRanks& launched, int tp) {
  if (tp <= 1) {
    if (launched.size > 1) {
      return make_error(
          "this process is one of {} that mpirun started, but --tp is {}: pass --tp {} to split "
          "the model over them, or run tern without mpirun",
          launched.size, tp, launched.size);
    }
    return {};
  }
  if (launched.size == 0) {
    return make_error(
        "--tp {} splits the model over {} processes, one rank each; start them with mpirun: "
        "`mpirun -np {} tern <command> --tp {} ...` (add --oversubscribe when the machine has "
        "fewer cores than ranks; as root, set OMPI_ALLOW_RUN_AS_ROOT=1 "
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1), or start each one yourself, on this host or "
        "others, with `--rendezvous HOST:PORT --rank R` (R from 0 to {}; rank 0 listens at "
        "HOST:PORT)",
        tp, tp, tp, tp, tp - 1);
  }
  if (launched.size != tp) {
    return make_error("--tp {} needs {} processes, but mpirun started {}: use mpirun -np {}", tp,
                      tp, launched.size, tp);
  }
  return {};
}

// Without mpirun: checks --rendezvous and --rank against --tp, then meets the other ranks.
Result<std::unique_ptr<Communicator>> join_over_tcp(const LoadOptions& o) {
  if (o.rendezvous.empty()) {
    return make_error(
        "--rank {} needs --rendezvous HOST:PORT (rank 0's address, where the ranks meet), or "
        "TERN_RENDEZVOUS",
        o.rank);
  }
  if (o.tp <= 1) {
    return make_error(
        "--rendezvous {} joins the ranks of a model split over several processes: it needs --tp "
        "N (N of 2 or more, the number of processes)",
        o.rendezvous);
  }
  if (o.rank < 0) {
    return make_error(
        "--rendezvous needs --rank R (or TERN_RANK): 0 for the process that listens at {}, 1..{} "
        "for the others",
        o.rendezvous, o.tp - 1);
  }
  if (o.rank >= o.tp) {
    return make_error("--rank {} with --tp {}: the ranks are 0..{}", o.rank, o.tp, o.tp - 1);
  }
  TERN_TRY(parse_rendezvous(o.rendezvous));
  return make_tcp_communicator(o.rendezvous, o.rank, o.tp, o.rendezvous_timeout);
}

// Tensor parallelism: joins the --tp ranks, over TCP when given a rendezvous, else the processes
// mpirun started (checking that there are --tp of them). Each rank's CPU threads default to its
// share of the host's; only rank 0 draws progress.
Result<void> join_ranks(LoadedModel& m, LoadOptions& o) {
  LaunchedRanks placed;
  if (!o.rendezvous.empty() || o.rank >= 0) {
    auto comm = join_over_tcp(o);
    if (!comm) return comm.error();
    m.comm = std::move(*comm);
    placed = {o.tp, o.rank, m.comm->local_rank(), m.comm->local_size()};
  } else {
    const LaunchedRanks launched = launched_ranks();
    auto checked = check_launch(launched, o.tp);
    if (!checked) {
      // Every rank sees the same flags and environment: rank 0 alone says what is wrong.
      if (launched.rank != 0) return Error{checked.error().message, kErrorReportedByRank0};
      return checked;
    }
    if (o.tp <= 1) return {};
    auto comm = make_mpi_communicator();
    if (!comm) return comm.error();
    if ((*comm)->size() != o.tp) {
      return make_error("--tp {}: the MPI group has {} ranks", o.tp, (*comm)->size());
    }
    m.comm = std::move(*comm);
    placed = launched;
  }
  if (o.threads == 0) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    o.threads = std::max<size_t>(1, hw / static_cast<unsigned>(std::max(1, placed.local_size)));
  }
  if (o.device == "cuda") o.device = fmt::format("cuda:{}", placed.local_rank);
  // GPUs talk over NCCL (Open MPI or TCP only carries its id and the control messages).
  int gpu = -1;
  if (o.device.starts_with("cuda:")) {
    const std::string n = o.device.substr(5);
    if (auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), gpu);
        ec != std::errc() || end != n.data() + n.size()) {
      return make_error("device '{}': expected cuda:N with N a GPU number", o.device);
    }
  }
  if (gpu >= 0 && nccl_available()) {
    auto nccl = make_nccl_communicator(*m.comm, gpu);
    if (!nccl) return nccl.error();
    m.bootstrap = std::move(m.comm);
    m.comm = std::move(*nccl);
  }
  o.progress = o.progress && m.comm->rank() == 0;
  return {};
}

// The file, the device, the tokenizer and this rank's share of the weights.
Result<bool> load_share(LoadedModel& m, const std::string& path, const LoadOptions& options) {
  // A GGUF file, or a Hugging Face directory (config.json + safetensors) opened as one.
  const bool hf_dir = is_hf_model_dir(path);
  auto file = hf_dir ? open_hf_model(path) : GgufFile::open(path);
  if (!file) return file.error();
  m.file = std::move(*file);
  auto info = model_info_from_gguf(m.file);
  if (!info) return info.error();
  m.info = *info;
  // Host memory by default; the GPU's free memory once the weights are on it.
  bool on_gpu = false;
  if (options.device == "cpu") {
    m.device = std::make_unique<CpuDevice>(options.threads);
  } else if (options.device == "cuda" || options.device.starts_with("cuda:")) {
#ifdef TERN_HAVE_CUDA
    TERN_TRY(make_cuda_device(m, options.device));
    on_gpu = true;
#else
    return make_error(
        "device '{}' is not available in this build (available: cpu; build with -DTERN_CUDA=ON "
        "for cuda)",
        options.device);
#endif
  } else {
    return make_error("unknown device '{}' (cpu or cuda)", options.device);
  }
  if (const GgufValue* t = m.file.metadata().find("tokenizer.chat_template"); t && t->as_string()) {
    m.chat_template = *t->as_string();
  }
  if (hf_dir) {
    auto json_path = hf_tokenizer_json_path(path);
    if (!json_path) return make_error("{} has no tokenizer.json", path);
    auto tokenizer = Tokenizer::from_hf_json(*json_path);
    if (!tokenizer) return tokenizer.error();
    m.tokenizer = std::move(*tokenizer);
  } else {
    auto spec = tokenizer_spec_from_gguf(m.file);
    if (!spec) return spec.error();
    auto tokenizer = Tokenizer::from_spec(*spec);
    if (!tokenizer) return tokenizer.error();
    m.tokenizer = std::move(*tokenizer);
  }
  prefetch(m.file, options.progress);
  auto model =
      load_model(m.file, *m.device, m.comm ? TensorParallel::over(*m.comm) : TensorParallel{});
  if (!model) return model.error();
  m.model = std::move(*model);
  return on_gpu;
}

// The context one sequence may hold (rank 0's choice under tensor parallelism, so that every
// rank's KV pool has the same blocks) and the KV cache.
Result<void> make_cache(LoadedModel& m, const LoadOptions& options, bool on_gpu) {
  const int64_t limit = m.model->shape().context_length;
  uint64_t available = 0, reserve = 0;
  if (on_gpu) {
#ifdef TERN_HAVE_CUDA
    auto gpu = cuda_device_info(static_cast<CudaDevice&>(*m.device).info().ordinal);
    if (!gpu) return gpu.error();
    available = gpu->free_bytes;
    reserve = kWorkBytes;
#endif
  } else {
    available = available_memory();
    reserve = m.file.tensor_bytes() + kWorkBytes;
  }
  int64_t context = options.context > 0 ? options.context
                                        : default_context(m, options.kv_type,
                                                          std::max<int64_t>(1, options.sequences),
                                                          available, reserve);
  if (m.comm) TERN_TRY(m.comm->broadcast(&context, sizeof(context), 0));
  if (context > limit) {
    return make_error("--ctx {} is larger than the model's context length {}", context, limit);
  }
  if (context < 16) return make_error("--ctx {} is too small (at least 16 tokens)", context);
  m.context = context;
  if (options.sequences < 1 || options.sequences > 4096) {
    return make_error("the number of parallel sequences must be between 1 and 4096, not {}",
                      options.sequences);
  }
  // Each sequence holds whole blocks: a context that is not a multiple of the block size still
  // needs its last block in every one of the sequences.
  const KvCacheConfig one = m.model->kv_config(context, options.kv_type);
  auto cache = KvCache::create(
      *m.device,
      m.model->kv_config(one.blocks * one.block_size * options.sequences, options.kv_type));
  if (!cache) return cache.error();
  m.cache = std::make_unique<KvCache>(std::move(*cache));
  return {};
}

}  // namespace

Result<void> LoadedModel::follow() {
  if (!follower()) return Error{"follow(): this process is not a follower rank"};
  return follow_leader(*model, *cache, *comm);
}

int64_t prefill_chunk_tokens(const ModelShape& shape, int64_t feed_forward, bool on_gpu) {
  static const int64_t forced = [] {
    const char* v = std::getenv("TERN_PREFILL_CHUNK");
    const int64_t n = v == nullptr ? 0 : std::atoll(v);
    return n >= 16 && n <= 65536 ? n : 0;
  }();
  if (forced > 0) return forced;
  constexpr int64_t kCpuChunk = 512;
  if (!on_gpu) return kCpuChunk;
  const int64_t ffn = feed_forward > 0 ? feed_forward : 4 * shape.hidden;
  const int64_t q = shape.heads * shape.head_dim, kv = shape.kv_heads * shape.head_dim;
  const int64_t bytes_per_token =
      4 * (4 * shape.hidden + q + 2 * kv + 3 * ffn) + 2 * std::max(shape.hidden, ffn);
  constexpr auto kActivationBytes = static_cast<int64_t>(kWorkBytes / 4 * 3);
  int64_t chunk = 2048;
  while (chunk > kCpuChunk && chunk * bytes_per_token > kActivationBytes) chunk /= 2;
  return chunk;
}

Result<std::unique_ptr<LoadedModel>> load_model_file(const std::string& path,
                                                     const LoadOptions& options) {
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  LoadOptions o = options;
  TERN_TRY(join_ranks(*m, o));
  auto on_gpu = load_share(*m, path, o);
  Result<void> loaded = on_gpu ? Result<void>{} : Result<void>{on_gpu.error()};
  if (m->comm) loaded = agree(*m->comm, std::move(loaded), "load its share of the model");
  TERN_TRY(loaded);
  Result<void> cached = make_cache(*m, o, *on_gpu);
  if (m->comm) cached = agree(*m->comm, std::move(cached), "make its KV cache");
  TERN_TRY(cached);
  m->prefill_chunk = prefill_chunk_tokens(
      m->model->shape(), static_cast<int64_t>(m->info.feed_forward_length.value_or(0)), *on_gpu);
  if (m->comm && m->comm->rank() == 0) {
    m->group = std::make_shared<GroupStatus>();
    m->model = make_leader_model(std::move(m->model), *m->comm, m->group);
  }
  return m;
}

}  // namespace tern
