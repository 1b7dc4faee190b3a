// The CPU communicator over TCP, for ranks started without mpirun: rank 0 listens on the
// rendezvous address, the others connect to it and say who they are (rank, group size, protocol
// version, hostname); rank 0 answers with the table of every rank's address, and the followers
// connect to each other, so that every pair of ranks has one connection (a full mesh: send/recv
// between any two). Collectives are a star through rank 0: the others send it their data, it
// sums in rank order (rank 0's, then 1's, 2's, ...) and sends back the result, which is thus
// the same bits on every rank. Every message is framed (magic, op, sequence number, byte count):
// a rank that makes another call than its peer is an error, not a misread buffer. Sockets block
// (a rank idling in broadcast sleeps in recv); a peer that dies or closes its socket ends the
// calls waiting on it with an error, and the rank that sees it drops every connection, so that
// no other rank waits forever either. Hosts must share the byte order (x86-64, arm64).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "backend/comm/communicator.h"

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x4e524554;  // "TERN" in memory order
constexpr uint16_t kVersion = 1;
constexpr size_t kMaxText = 1 << 16;  // a rejection's or an end's reason, the address table

enum class Op : uint16_t {
  Hello = 1,    // a follower to rank 0: HelloBody
  Welcome = 2,  // rank 0 to a follower: the table, one "ip port hostname" line per rank
  Reject = 3,   // rank 0 to a follower: why it is not taken (text)
  Mesh = 4,     // a follower to a lower follower it connects to: its rank (int32)
  AllReduce = 16,
  AllGather = 17,
  ReduceScatter = 18,
  PointToPoint = 19,
  Broadcast = 20,
  Barrier = 21,
  End = 31,  // the sender leaves the group (text: why)
};

const char* op_name(uint16_t op) {
  switch (static_cast<Op>(op)) {
    case Op::Hello:
      return "hello";
    case Op::Welcome:
      return "welcome";
    case Op::Reject:
      return "rejection";
    case Op::Mesh:
      return "mesh hello";
    case Op::AllReduce:
      return "all-reduce";
    case Op::AllGather:
      return "all-gather";
    case Op::ReduceScatter:
      return "reduce-scatter";
    case Op::PointToPoint:
      return "send/receive";
    case Op::Broadcast:
      return "broadcast";
    case Op::Barrier:
      return "barrier";
    case Op::End:
      return "end";
  }
  return "unknown message";
}

struct Header {
  uint32_t magic = kMagic;
  uint16_t op = 0;
  uint16_t version = kVersion;
  uint64_t seq = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(Header) == 24);

struct HelloBody {
  int32_t rank = 0;
  int32_t size = 0;
  int32_t listen_port = 0;  // where the followers above this one connect to it (0: none)
  char hostname[256] = {};
};

std::string errno_text(int e) {
  return std::error_code(e, std::generic_category()).message();
}

// Read/write outcomes: 0, an errno value, or kEof (the peer closed its end).
constexpr int kEof = -1;

std::string io_text(int rc) {
  return rc == kEof ? std::string("the connection closed") : errno_text(rc);
}

int64_t ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max<int64_t>(0, left.count());
}

// Waits until `fd` is readable (or writable); ETIMEDOUT at `deadline`.
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms_left(deadline), 1 << 30)));
    if (n > 0) return 0;
    if (n == 0) return ETIMEDOUT;
    if (errno != EINTR) return errno;
  }
}

// Writes every byte of iov[n] (MSG_NOSIGNAL: a closed peer is EPIPE, not a signal).
int write_all(int fd, iovec* iov, int n) {
  while (n > 0 && iov->iov_len == 0) ++iov, --n;
  while (n > 0) {
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    auto left = static_cast<size_t>(w);
    while (n > 0 && left >= iov->iov_len) left -= iov->iov_len, ++iov, --n;
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

// Reads exactly `bytes`; with a deadline, waits no longer (ETIMEDOUT).
int read_all(int fd, void* data, size_t bytes,
             std::optional<Clock::time_point> deadline = std::nullopt) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (deadline) {
      if (int rc = wait_fd(fd, POLLIN, *deadline); rc != 0) return rc;
    }
    const ssize_t r = ::recv(fd, p, bytes, 0);
    if (r > 0) {
      p += r;
      bytes -= static_cast<size_t>(r);
    } else if (r == 0) {
      return kEof;
    } else if (errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

int send_frame_fd(int fd, Op op, uint64_t seq, const void* data, size_t bytes) {
  Header h;
  h.op = static_cast<uint16_t>(op);
  h.seq = seq;
  h.bytes = bytes;
  iovec iov[2] = {{&h, sizeof(h)}, {const_cast<void*>(data), bytes}};
  return write_all(fd, iov, 2);
}

// Latency over throughput (a forward's collectives are small), and a dead host (no RST) noticed
// within about a minute rather than the kernel's two hours.
void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 30, interval = 5, count = 6;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

void set_blocking(int fd, bool blocking) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

std::string seconds_text(std::chrono::milliseconds t) {
  if (t.count() % 1000 == 0) return fmt::format("{} s", t.count() / 1000);
  return fmt::format("{:.1f} s", static_cast<double>(t.count()) / 1000.0);
}

// The numeric address of a socket's end (getsockname / getpeername), without the port.
std::string address_text(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof(text));
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof(text));
  }
  return text;
}

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return "?";
  return address_text(a);
}

int listen_port(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof(a);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return 0;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(a).sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6&>(a).sin6_port);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Owns a socket until released.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() { close_fd(fd); }
  int release() { return std::exchange(fd, -1); }
};

// A listening socket on host:port ("" host: every address of `family`; port 0: any free one).
Result<Fd> listen_on(const std::string& host, int port, int family, int backlog,
                     const std::string& shown) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
      rc != 0) {
    return make_error("cannot listen on {}: {}", shown, ::gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.fd < 0) {
      why = errno_text(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.fd, backlog) != 0) {
      why = errno_text(errno);
      continue;
    }
    ::freeaddrinfo(list);
    return fd;
  }
  ::freeaddrinfo(list);
  return make_error("cannot listen on {}: {}", shown, why);
}

// One connection attempt to host:port, waiting until `deadline` at most; "" and the socket, or
// why it failed.
std::pair<Fd, std::string> connect_once(const std::string& host, int port,
                                        Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    return {Fd(), ::gai_strerror(rc)};
  }
  std::string why = "no address";
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.fd < 0) {
      why = errno_text(errno);
      continue;
    }
    set_blocking(fd.fd, false);
    int err = 0;
    if (::connect(fd.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err = wait_fd(fd.fd, POLLOUT, deadline);
        if (err == 0) {
          socklen_t n = sizeof(err);
          ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &err, &n);
        }
      }
    }
    if (err != 0) {
      why = errno_text(err);
      continue;
    }
    set_blocking(fd.fd, true);
    tune(fd.fd);
    ::freeaddrinfo(list);
    return {std::move(fd), ""};
  }
  ::freeaddrinfo(list);
  return {Fd(), why};
}

// Connects, retrying every 100 ms until `deadline`; the last reason on failure.
std::pair<Fd, std::string> connect_until(const std::string& host, int port,
                                         Clock::time_point deadline) {
  std::string why;
  for (;;) {
    auto [fd, reason] = connect_once(host, port, deadline);
    if (fd.fd >= 0) return {std::move(fd), ""};
    why = reason;
    if (Clock::now() >= deadline) return {Fd(), why};
    std::this_thread::sleep_until(
        std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
}

// Accepts one connection before `deadline`.
Result<Fd> accept_until(int listener, Clock::time_point deadline) {
  for (;;) {
    if (int rc = wait_fd(listener, POLLIN, deadline); rc != 0) return Error{errno_text(rc), rc};
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      tune(fd);
      return Fd(fd);
    }
    if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
      return Error{errno_text(errno), errno};
    }
  }
}

// Reads one frame's header and its payload (at most `limit` bytes) before `deadline`.
Result<std::pair<Header, std::string>> read_frame_until(int fd, size_t limit,
                                                        Clock::time_point deadline) {
  Header h;
  if (int rc = read_all(fd, &h, sizeof(h), deadline); rc != 0) return Error{io_text(rc), rc};
  if (h.magic != kMagic) return Error{"it is not speaking Tern's rank protocol", -2};
  if (h.version != kVersion) {
    return Error{fmt::format("it speaks version {} of Tern's rank protocol and this process "
                             "version {}: run the same tern on every rank",
                             h.version, kVersion),
                 -3};
  }
  if (h.bytes > limit) {
    return Error{
        fmt::format("its {} message has {} bytes (at most {})", op_name(h.op), h.bytes, limit), -2};
  }
  std::string body(h.bytes, '\0');
  if (int rc = read_all(fd, body.data(), body.size(), deadline); rc != 0)
    return Error{io_text(rc), rc};
  return std::pair{h, std::move(body)};
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(int rank, int size, std::vector<int> fds, std::string where, int local_rank,
                  int local_size)
      : rank_(rank),
        size_(size),
        fds_(std::move(fds)),
        tx_(static_cast<size_t>(size), 0),
        rx_(static_cast<size_t>(size), 0),
        where_(std::move(where)),
        local_rank_(local_rank),
        local_size_(local_size) {}
  ~TcpCommunicator() override { drop_all(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override {
    return fmt::format("TCP, {} ranks (rendezvous {})", size_, where_);
  }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  bool leader_survives() const override { return true; }

  Result<void> all_reduce_sum(float* data, size_t count) override {
    TERN_TRY(usable());
    const size_t bytes = count * sizeof(float);
    if (rank_ != 0) {
      TERN_TRY(send_frame(0, Op::AllReduce, data, bytes));
      return recv_frame(0, Op::AllReduce, data, bytes);
    }
    scratch_.resize(count);
    for (int r = 1; r < size_; ++r) {  // rank order: the same sum, bit for bit, on every rank
      TERN_TRY(recv_frame(r, Op::AllReduce, scratch_.data(), bytes));
      for (size_t i = 0; i < count; ++i) data[i] += scratch_[i];
    }
    for (int r = 1; r < size_; ++r) TERN_TRY(send_frame(r, Op::AllReduce, data, bytes));
    return {};
  }

  Result<void> all_gather(const float* in, size_t count, float* out) override {
    TERN_TRY(usable());
    const size_t bytes = count * sizeof(float), all = bytes * static_cast<size_t>(size_);
    if (rank_ != 0) {
      TERN_TRY(send_frame(0, Op::AllGather, in, bytes));
      return recv_frame(0, Op::AllGather, out, all);
    }
    if (out != in) std::memmove(out, in, bytes);
    for (int r = 1; r < size_; ++r) {
      TERN_TRY(recv_frame(r, Op::AllGather, out + static_cast<size_t>(r) * count, bytes));
    }
    for (int r = 1; r < size_; ++r) TERN_TRY(send_frame(r, Op::AllGather, out, all));
    return {};
  }

  Result<void> reduce_scatter_sum(const float* in, float* out, size_t count) override {
    TERN_TRY(usable());
    const size_t bytes = count * sizeof(float);
    const size_t total = count * static_cast<size_t>(size_);
    if (rank_ != 0) {
      TERN_TRY(send_frame(0, Op::ReduceScatter, in, total * sizeof(float)));
      return recv_frame(0, Op::ReduceScatter, out, bytes);
    }
    sum_.assign(in, in + total);
    scratch_.resize(total);
    for (int r = 1; r < size_; ++r) {
      TERN_TRY(recv_frame(r, Op::ReduceScatter, scratch_.data(), total * sizeof(float)));
      for (size_t i = 0; i < total; ++i) sum_[i] += scratch_[i];
    }
    for (int r = 1; r < size_; ++r) {
      TERN_TRY(
          send_frame(r, Op::ReduceScatter, sum_.data() + static_cast<size_t>(r) * count, bytes));
    }
    std::memmove(out, sum_.data(), bytes);
    return {};
  }

  Result<void> send(const float* data, size_t count, int peer) override {
    TERN_TRY(check_peer(peer, "send to"));
    TERN_TRY(usable());
    return send_frame(peer, Op::PointToPoint, data, count * sizeof(float));
  }
  Result<void> recv(float* data, size_t count, int peer) override {
    TERN_TRY(check_peer(peer, "receive from"));
    TERN_TRY(usable());
    return recv_frame(peer, Op::PointToPoint, data, count * sizeof(float));
  }

  Result<void> broadcast(void* data, size_t bytes, int root) override {
    TERN_TRY(check_peer(root, "broadcast from", true));
    TERN_TRY(usable());
    if (rank_ != root) return recv_frame(root, Op::Broadcast, data, bytes);
    for (int r = 0; r < size_; ++r) {
      if (r != root) TERN_TRY(send_frame(r, Op::Broadcast, data, bytes));
    }
    return {};
  }

  Result<void> barrier() override {
    TERN_TRY(usable());
    if (rank_ != 0) {
      TERN_TRY(send_frame(0, Op::Barrier, nullptr, 0));
      return recv_frame(0, Op::Barrier, nullptr, 0);
    }
    for (int r = 1; r < size_; ++r) TERN_TRY(recv_frame(r, Op::Barrier, nullptr, 0));
    for (int r = 1; r < size_; ++r) TERN_TRY(send_frame(r, Op::Barrier, nullptr, 0));
    return {};
  }

  void abort(int exit_code) override {
    end_all(fmt::format("rank {} stopped (exit code {})", rank_, exit_code));
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(exit_code);
  }

  void disband(const std::string& reason) override {
    if (broken_.empty()) broken_ = reason;
    end_all(fmt::format("rank {} ended the group: {}", rank_, reason));
  }

 private:
  Result<void> check_peer(int peer, const char* what, bool self_ok = false) const {
    if (peer < 0 || peer >= size_ || (peer == rank_ && !self_ok)) {
      return make_error("{} rank {}: ranks are 0..{} and this is rank {}", what, peer, size_ - 1,
                        rank_);
    }
    return {};
  }

  Result<void> usable() const {
    if (broken_.empty()) return {};
    return make_error("rank {}: the tensor-parallel group is gone: {}", rank_, broken_);
  }

  // The first failure: remembered, told to every peer that can still hear it, and every
  // connection dropped, so that no rank waits on this one.
  Error fail(std::string message) {
    if (broken_.empty()) broken_ = message;
    end_all(message);
    return Error{fmt::format("rank {}: {}", rank_, message)};
  }
  Error lost(int peer, const char* what, int rc) {
    return fail(fmt::format("rank {} is gone ({} during {})", peer, io_text(rc), what));
  }

  // Best effort: an End frame that fits the socket's buffer now, then close.
  void end_all(const std::string& reason) {
    for (int r = 0; r < size_; ++r) {
      int& fd = fds_[static_cast<size_t>(r)];
      if (fd < 0) continue;
      Header h;
      h.op = static_cast<uint16_t>(Op::End);
      h.seq = tx_[static_cast<size_t>(r)];
      h.bytes = std::min(reason.size(), size_t{1024});
      std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
      frame.append(reason, 0, h.bytes);
      (void)!::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(fd, SHUT_RDWR);
      close_fd(fd);
    }
  }
  void drop_all() {
    for (int& fd : fds_) close_fd(fd);
  }

  Result<void> send_frame(int peer, Op op, const void* data, size_t bytes) {
    const int fd = fds_[static_cast<size_t>(peer)];
    if (fd < 0) return fail(fmt::format("no connection to rank {}", peer));
    if (int rc = send_frame_fd(fd, op, tx_[static_cast<size_t>(peer)], data, bytes); rc != 0) {
      return lost(peer, op_name(static_cast<uint16_t>(op)), rc);
    }
    tx_[static_cast<size_t>(peer)]++;
    return {};
  }

  Result<void> recv_frame(int peer, Op op, void* data, size_t bytes) {
    const int fd = fds_[static_cast<size_t>(peer)];
    const char* what = op_name(static_cast<uint16_t>(op));
    if (fd < 0) return fail(fmt::format("no connection to rank {}", peer));
    Header h;
    if (int rc = read_all(fd, &h, sizeof(h)); rc != 0) return lost(peer, what, rc);
    if (h.magic != kMagic) {
      return fail(
          fmt::format("rank {} sent bytes that are not a Tern frame during {}", peer, what));
    }
    if (h.op == static_cast<uint16_t>(Op::End)) {
      std::string reason(std::min<uint64_t>(h.bytes, kMaxText), '\0');
      (void)read_all(fd, reason.data(), reason.size());
      return fail(fmt::format("rank {} left the group during {}: {}", peer, what, reason));
    }
    const uint64_t want_seq = rx_[static_cast<size_t>(peer)];
    if (h.op != static_cast<uint16_t>(op) || h.seq != want_seq || h.bytes != bytes) {
      return fail(fmt::format(
          "rank {} is out of step with rank {}: this rank waits for its {} of {} bytes (message "
          "{}), it sent a {} of {} bytes (message {}); every rank must make the same calls in the "
          "same order",
          peer, rank_, what, bytes, want_seq, op_name(h.op), h.bytes, h.seq));
    }
    if (int rc = read_all(fd, data, bytes); rc != 0) return lost(peer, what, rc);
    rx_[static_cast<size_t>(peer)]++;
    return {};
  }

  int rank_;
  int size_;
  std::vector<int> fds_;           // the connection to each rank (-1: this rank, or dropped)
  std::vector<uint64_t> tx_, rx_;  // frames sent to / received from each rank
  std::string where_;
  int local_rank_;
  int local_size_;
  std::string broken_;  // the first failure; every later call returns it
  std::vector<float> scratch_, sum_;
};

std::string this_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

struct Member {
  std::string address;  // as rank 0 sees it
  int port = 0;         // its listener for the followers above it
  std::string hostname;
};

// Rank `rank`'s place among the ranks on its host (the same hostname).
std::pair<int, int> placement(const std::vector<Member>& members, int rank) {
  int local_rank = 0, local_size = 0;
  for (size_t r = 0; r < members.size(); ++r) {
    if (members[r].hostname != members[static_cast<size_t>(rank)].hostname) continue;
    if (static_cast<int>(r) < rank) local_rank++;
    local_size++;
  }
  return {local_rank, std::max(1, local_size)};
}

void reject(int fd, const std::string& why) {
  (void)send_frame_fd(fd, Op::Reject, 0, why.data(), std::min(why.size(), kMaxText));
}

Result<std::unique_ptr<Communicator>> rank0(const RendezvousAddress& at, const std::string& shown,
                                            int size, std::chrono::milliseconds timeout) {
  auto listener = listen_on(at.host, at.port, AF_UNSPEC, size + 16, shown);
  if (!listener) return make_error("rank 0: {}", listener.error().message);
  const auto deadline = Clock::now() + timeout;
  std::vector<Fd> peers(static_cast<size_t>(size));
  std::vector<Member> members(static_cast<size_t>(size));
  members[0].hostname = this_hostname();
  int joined = 1;
  // A bad peer fails the whole rendezvous: it, and those already in, hear why.
  auto refuse = [&](int fd, const std::string& why) -> Error {
    reject(fd, why);
    for (auto& p : peers) {
      if (p.fd >= 0) reject(p.fd, why);
    }
    return make_error("rank 0: {}", why);
  };
  while (joined < size) {
    auto accepted = accept_until(listener->fd, deadline);
    if (!accepted) {
      std::string missing;
      for (int r = 1; r < size; ++r) {
        if (peers[static_cast<size_t>(r)].fd < 0)
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      const std::string why =
          accepted.error().code == ETIMEDOUT
              ? fmt::format("only {} of {} ranks joined at {} within {} (missing: rank {})", joined,
                            size, shown, seconds_text(timeout), missing)
              : fmt::format("accepting ranks at {}: {}", shown, accepted.error().message);
      for (auto& p : peers) {
        if (p.fd >= 0) reject(p.fd, why);
      }
      return make_error("rank 0: {}", why);
    }
    Fd fd = std::move(*accepted);
    const std::string from = peer_address(fd.fd);
    // A peer gets a few seconds to say who it is (a stray connection is dropped).
    auto frame = read_frame_until(fd.fd, sizeof(HelloBody),
                                  std::min(deadline, Clock::now() + std::chrono::seconds(10)));
    if (!frame) {
      if (frame.error().code == -3) {
        return refuse(fd.fd, fmt::format("the process at {}: {}", from, frame.error().message));
      }
      continue;  // not a Tern rank, or one that hung up: keep waiting for the real ones
    }
    HelloBody hello;
    if (frame->first.op != static_cast<uint16_t>(Op::Hello) ||
        frame->second.size() != sizeof(hello)) {
      continue;
    }
    std::memcpy(&hello, frame->second.data(), sizeof(hello));
    hello.hostname[sizeof(hello.hostname) - 1] = '\0';
    if (hello.size != size) {
      return refuse(fd.fd, fmt::format("rank {} (at {}) is in a group of {} ranks, but rank 0's "
                                       "has {}: give every rank the same --tp",
                                       hello.rank, from, hello.size, size));
    }
    if (hello.rank < 1 || hello.rank >= size) {
      return refuse(fd.fd, fmt::format("the process at {} says it is rank {}, but a group of {} "
                                       "has ranks 0..{} and rank 0 is this one",
                                       from, hello.rank, size, size - 1));
    }
    auto& slot = peers[static_cast<size_t>(hello.rank)];
    if (slot.fd >= 0) {
      return refuse(fd.fd,
                    fmt::format("two processes say they are rank {} (at {} and at {})", hello.rank,
                                members[static_cast<size_t>(hello.rank)].address, from));
    }
    members[static_cast<size_t>(hello.rank)] = Member{from, hello.listen_port, hello.hostname};
    slot = std::move(fd);
    joined++;
  }
  std::string table;
  for (const auto& m : members) {
    table += fmt::format("{} {} {}\n", m.address.empty() ? "-" : m.address, m.port,
                         m.hostname.empty() ? "?" : m.hostname);
  }
  std::vector<int> fds(static_cast<size_t>(size), -1);
  for (int r = 1; r < size; ++r) {
    auto& p = peers[static_cast<size_t>(r)];
    if (int rc = send_frame_fd(p.fd, Op::Welcome, 0, table.data(), table.size()); rc != 0) {
      for (auto& q : peers) {
        if (q.fd >= 0) reject(q.fd, fmt::format("rank {} left during the rendezvous", r));
      }
      return make_error("rank 0: rank {} left during the rendezvous ({})", r, io_text(rc));
    }
  }
  for (int r = 1; r < size; ++r)
    fds[static_cast<size_t>(r)] = peers[static_cast<size_t>(r)].release();
  auto [local_rank, local_size] = placement(members, 0);
  return std::unique_ptr<Communicator>(
      std::make_unique<TcpCommunicator>(0, size, std::move(fds), shown, local_rank, local_size));
}

Result<std::unique_ptr<Communicator>> follower(const RendezvousAddress& at,
                                               const std::string& shown, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto [leader, why] = connect_until(at.host, at.port, deadline);
  if (leader.fd < 0) {
    return make_error("rank {}: could not reach rank 0 at {} within {}: {}", rank, shown,
                      seconds_text(timeout), why);
  }
  // The followers above this one connect to it: a listener on every address of the family
  // that reached rank 0.
  sockaddr_storage local{};
  socklen_t n = sizeof(local);
  ::getsockname(leader.fd, reinterpret_cast<sockaddr*>(&local), &n);
  Fd listener;
  if (rank < size - 1) {
    auto l = listen_on("", 0, local.ss_family, size + 16, "a free port");
    if (!l) return make_error("rank {}: {}", rank, l.error().message);
    listener = std::move(*l);
  }
  HelloBody hello;
  hello.rank = rank;
  hello.size = size;
  hello.listen_port = listener.fd >= 0 ? listen_port(listener.fd) : 0;
  const std::string host = this_hostname();
  std::snprintf(hello.hostname, sizeof(hello.hostname), "%s", host.c_str());
  if (int rc = send_frame_fd(leader.fd, Op::Hello, 0, &hello, sizeof(hello)); rc != 0) {
    return make_error("rank {}: rank 0 at {} dropped the connection ({})", rank, shown,
                      io_text(rc));
  }
  // Rank 0 answers once every rank has joined, or gives up after its own timeout.
  auto answer =
      read_frame_until(leader.fd, kMaxText, Clock::now() + timeout * 2 + std::chrono::seconds(5));
  if (!answer) {
    return make_error("rank {}: no answer from rank 0 at {}: {}", rank, shown,
                      answer.error().message);
  }
  if (answer->first.op == static_cast<uint16_t>(Op::Reject)) {
    return make_error("rank {}: rank 0 at {} refused the group: {}", rank, shown, answer->second);
  }
  if (answer->first.op != static_cast<uint16_t>(Op::Welcome)) {
    return make_error("rank {}: rank 0 at {} sent a {} instead of the rank table", rank, shown,
                      op_name(answer->first.op));
  }
  std::vector<Member> members;
  std::istringstream lines(answer->second);
  for (Member m; lines >> m.address >> m.port >> m.hostname;) members.push_back(m);
  if (static_cast<int>(members.size()) != size) {
    return make_error("rank {}: rank 0's table has {} ranks, not {}", rank, members.size(), size);
  }
  std::vector<int> fds(static_cast<size_t>(size), -1);
  std::vector<Fd> owned(static_cast<size_t>(size));
  owned[0] = std::move(leader);
  // The mesh: connect to every follower below, accept every one above.
  const auto mesh_deadline = Clock::now() + timeout;
  for (int r = 1; r < rank; ++r) {
    const Member& m = members[static_cast<size_t>(r)];
    auto [fd, reason] = connect_until(m.address, m.port, mesh_deadline);
    if (fd.fd < 0) {
      return make_error("rank {}: could not reach rank {} at {} port {}: {}", rank, r, m.address,
                        m.port, reason);
    }
    const int32_t me = rank;
    if (int rc = send_frame_fd(fd.fd, Op::Mesh, 0, &me, sizeof(me)); rc != 0) {
      return make_error("rank {}: rank {} dropped the connection ({})", rank, r, io_text(rc));
    }
    owned[static_cast<size_t>(r)] = std::move(fd);
  }
  for (int waiting = size - 1 - rank; waiting > 0; --waiting) {
    auto accepted = accept_until(listener.fd, mesh_deadline);
    if (!accepted) {
      return make_error("rank {}: the ranks above it did not connect within {}: {}", rank,
                        seconds_text(timeout), accepted.error().message);
    }
    auto frame = read_frame_until(accepted->fd, sizeof(int32_t), mesh_deadline);
    int32_t from = -1;
    if (frame && frame->first.op == static_cast<uint16_t>(Op::Mesh) &&
        frame->second.size() == sizeof(from)) {
      std::memcpy(&from, frame->second.data(), sizeof(from));
    }
    if (from <= rank || from >= size || owned[static_cast<size_t>(from)].fd >= 0) {
      ++waiting;  // not one of the ranks above (a stray connection): keep waiting
      continue;
    }
    owned[static_cast<size_t>(from)] = std::move(*accepted);
  }
  for (int r = 0; r < size; ++r) {
    if (r != rank) fds[static_cast<size_t>(r)] = owned[static_cast<size_t>(r)].release();
  }
  auto [local_rank, local_size] = placement(members, rank);
  return std::unique_ptr<Communicator>(
      std::make_unique<TcpCommunicator>(rank, size, std::move(fds), shown, local_rank, local_size));
}

}  // namespace

Result<RendezvousAddress> parse_rendezvous(const std::string& text, const std::string& what) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return make_error("{} '{}': expected HOST:PORT, for example 10.0.0.1:29500", what, text);
  }
  RendezvousAddress a;
  a.host = text.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  } else if (a.host.find(':') != std::string::npos) {
    return make_error("{} '{}': write an IPv6 address in brackets, [::1]:29500", what, text);
  }
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
      std::stoi(port) > 65535) {
    return make_error("{} '{}': the port '{}' is not a number from 1 to 65535", what, text, port);
  }
  a.port = std::stoi(port);
  return a;
}

Result<std::unique_ptr<Communicator>> make_tcp_communicator(const std::string& rendezvous, int rank,
                                                            int size,
                                                            std::chrono::milliseconds timeout) {
  auto at = parse_rendezvous(rendezvous);
  if (!at) return at.error();
  if (size < 1) return make_error("a group of {} ranks: it needs at least one", size);
  if (rank < 0 || rank >= size) {
    return make_error("rank {}: a group of {} ranks has ranks 0..{}", rank, size, size - 1);
  }
  if (size == 1) return make_single_rank_communicator();
  if (rank == 0) return rank0(*at, rendezvous, size, timeout);
  return follower(*at, rendezvous, rank, size, timeout);
}

}  // namespace tern
