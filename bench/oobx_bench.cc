// oobx-bench: Google Benchmark benchmarks of oobx, run on every rank of a job.
//
//   oobx-run -n 8 -- build/bin/oobx-bench [--sizes=8,1024] [--batches=5]
//            [--batch-ms=30] [--max-buffer=BYTES] [--window=64] [--variant=NAME]
//            [--benchmark_filter=REGEX] [--benchmark_out=FILE --benchmark_out_format=json]
//   oobx-bench --help     (needs no job)
//
// Every benchmark iteration is one batch of operations. The batch size is
// chosen from a warm-up whose time is the maximum over ranks, so every rank
// computes the same count and runs the same number of operations; Google
// Benchmark's own adaptive count differs between processes and would
// deadlock. The time reported for an operation is the batch time, maximum
// over ranks, divided by the operations in the batch (manual timing); its CPU
// time is the process CPU time of the batch, maximum over ranks, divided the
// same way. Rank 0 prints the table (plain units: µs, ms, GB/s) and writes the
// JSON file (per-operation real_time and cpu_time, numbers as numbers); the
// other ranks report nothing.
//
// Conventions (OSU micro-benchmarks and nccl-tests): an allgather's size is
// bytes per rank; algbw = nranks * size / t, busbw = algbw * (n - 1) / n, in
// GB/s (1e9 bytes per second); ping-pong latency is half the round trip.

#include <benchmark/benchmark.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "oobx.h"

namespace {

enum : int {
    TAG_PING = 7101,
    TAG_STREAM = 7102,
    TAG_ACK = 7103,
    TAG_PORT = 7104,
};

struct Options {
    std::vector<size_t> sizes{8,     16,     64,     256,     1024,    4096,
                              16384, 65536, 262144, 1048576, 4194304};
    int batches = 5;
    double batch_ms = 30.0;
    long max_inner = 100000;
    size_t max_buffer = size_t(256) << 20; // per rank: nranks * size above this is skipped
    int window = 64;
    std::string variant;
    bool init_no_barrier = false;
    bool oobx_mem = false; // --alloc=oobx: allgather and bcast buffers from oobx_mem_alloc
    bool touch = false;    // --touch: allgather rewrites its own slice before every call
};

struct Job {
    oobx_comm_t comm = nullptr;
    int rank = 0;
    int nranks = 1;
    Options opt;
    std::vector<double> gather; // nranks doubles, for the maximum over ranks
};

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// CPU time of the whole process (all its threads)
double cpu_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Thrown on the first failure: unwinding out of RunSpecifiedBenchmarks closes
// rank 0's JSON file with the results so far (bench/results.py reads a file
// cut short), then main returns 2.
struct BenchFailure {};

[[noreturn]] void fail(const Job &job, const char *what, int rc)
{
    std::fprintf(stderr, "oobx-bench: rank %d of %d: %s failed: %s (%s): %s\n", job.rank,
                 job.nranks, what, oobx_error_name(rc), oobx_strerror(rc), oobx_last_error());
    std::fflush(stderr);
    throw BenchFailure{};
}

[[noreturn]] void fail_errno(const Job &job, const char *what)
{
    std::fprintf(stderr, "oobx-bench: rank %d of %d: %s failed: %s\n", job.rank, job.nranks,
                 what, std::strerror(errno));
    std::fflush(stderr);
    throw BenchFailure{};
}

#define CHECK(job, call)                      \
    do {                                      \
        int rc_ = (call);                     \
        if (rc_ != OOBX_SUCCESS)              \
            fail((job), #call, rc_);          \
    } while (0)

double max_over_ranks(Job &job, double v)
{
    job.gather.assign(size_t(job.nranks), 0.0);
    job.gather[size_t(job.rank)] = v;
    CHECK(job, oobx_allgather(job.comm, job.gather.data(), sizeof(double)));
    return *std::max_element(job.gather.begin(), job.gather.end());
}

// The maxima over ranks of a and of b, in one allgather.
void max2_over_ranks(Job &job, double a, double b, double *max_a, double *max_b)
{
    job.gather.assign(2 * size_t(job.nranks), 0.0);
    job.gather[2 * size_t(job.rank)] = a;
    job.gather[2 * size_t(job.rank) + 1] = b;
    CHECK(job, oobx_allgather(job.comm, job.gather.data(), 2 * sizeof(double)));
    *max_a = *max_b = 0;
    for (int r = 0; r < job.nranks; r++) {
        *max_a = std::max(*max_a, job.gather[2 * size_t(r)]);
        *max_b = std::max(*max_b, job.gather[2 * size_t(r) + 1]);
    }
}

// Runs op in batches; returns the mean time of one op in seconds (maximum over
// ranks of each batch). Every rank must call this with the same arguments.
// The time reported for an iteration is the op's time divided by per_op_div
// (2 for a round trip reported one-way, the window for a stream); the CPU
// time (counter cpu_us, the JSON's cpu_time) is divided the same way. It is
// the process's CPU time, every thread of it (a transport's progress thread
// included), maximum over ranks.
template <class Op>
double run_batches(benchmark::State &st, Job &job, Op &&op, double per_op_div = 1.0)
{
    CHECK(job, oobx_barrier(job.comm));
    op(); // first use: lazy connections, page faults
    // probe with 1, 10, 100... ops until a probe lasts 2 ms: the decision is
    // taken on the maximum over ranks, so every rank takes the same
    long probe = 1;
    double t0, warm;
    auto probe_time = [&](long count) {
        CHECK(job, oobx_barrier(job.comm));
        t0 = now_s();
        for (long i = 0; i < count; i++)
            op();
        return max_over_ranks(job, now_s() - t0) / double(count);
    };
    for (;;) {
        warm = probe_time(probe);
        if (warm * double(probe) >= 2e-3 || probe >= job.opt.max_inner)
            break;
        probe *= 10;
    }
    // the last probe once more, the faster counting: one rank descheduled
    // during a short probe (a busy machine) would otherwise make batches of
    // a single operation
    warm = std::min(warm, probe_time(probe));
    long inner = 1;
    if (warm > 0)
        inner = long(job.opt.batch_ms * 1e-3 / warm);
    inner = std::max(1L, std::min(inner, job.opt.max_inner));

    double total = 0, best = 0, cpu_total = 0;
    long ops = 0;
    for (auto _ : st) {
        CHECK(job, oobx_barrier(job.comm));
        double c0 = cpu_s();
        t0 = now_s();
        for (long i = 0; i < inner; i++)
            op();
        double wall = now_s() - t0, cpu = cpu_s() - c0;
        double dt, dcpu;
        max2_over_ranks(job, wall, cpu, &dt, &dcpu);
        double per_op = dt / double(inner) / per_op_div;
        st.SetIterationTime(per_op);
        best = ops == 0 || per_op < best ? per_op : best;
        total += dt;
        cpu_total += dcpu;
        ops += inner;
    }
    st.counters["ops"] = double(ops);
    st.counters["min_us"] = best * 1e6; // the best batch: less sensitive to other load
    st.counters["cpu_us"] = ops ? cpu_total / double(ops) / per_op_div * 1e6 : 0.0;
    st.counters["ranks"] = job.nranks;
    return ops ? total / double(ops) : 0.0;
}

void set_size_counters(benchmark::State &st, size_t bytes, double t, double algbw_bytes,
                       double bus_factor)
{
    st.counters["bytes"] = double(bytes);
    st.counters["lat_us"] = t * 1e6;
    double algbw = t > 0 ? algbw_bytes / t / 1e9 : 0.0;
    st.counters["algbw_GBps"] = algbw;
    st.counters["busbw_GBps"] = algbw * bus_factor;
}

// A collective's buffer: plain memory, or oobx_mem_alloc's with --alloc=oobx
// (zero-filled either way).
class Buffer {
  public:
    Buffer(Job &job, size_t bytes) : job_(job), n_(bytes)
    {
        if (job.opt.oobx_mem && bytes) {
            void *p = nullptr;
            CHECK(job, oobx_mem_alloc(job.comm, bytes, &p));
            p_ = static_cast<char *>(p);
        } else {
            plain_.assign(bytes, 0);
            p_ = plain_.data();
        }
    }
    ~Buffer()
    {
        if (job_.opt.oobx_mem && n_)
            oobx_mem_free(job_.comm, p_);
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    char *data() { return p_; }
    const char &operator[](size_t i) const { return p_[i]; }

  private:
    Job &job_;
    size_t n_;
    char *p_ = nullptr;
    std::vector<char> plain_;
};

template <class B> void fill(B &buf, size_t off, size_t len, int who)
{
    std::memset(buf.data() + off, (who * 37 + 11) & 0xff, len);
}

template <class B> bool slice_ok(const B &buf, size_t off, size_t len, int who)
{
    char want = char((who * 37 + 11) & 0xff);
    return len == 0 || (buf[off] == want && buf[off + len - 1] == want &&
                        buf[off + len / 2] == want);
}

// ---- the benchmarks ------------------------------------------------------------

void bm_allgather(benchmark::State &st, Job &job, size_t size)
{
    const int n = job.nranks;
    Buffer buf(job, size_t(n) * size);
    fill(buf, size_t(job.rank) * size, size, job.rank);
    CHECK(job, oobx_allgather(job.comm, buf.data(), size));
    for (int r = 0; r < n; r++)
        if (!slice_ok(buf, size_t(r) * size, size, r)) {
            std::fprintf(stderr, "oobx-bench: rank %d: allgather of %zu B: slice of rank %d is wrong\n",
                         job.rank, size, r);
            throw BenchFailure{};
        }
    const bool touch = job.opt.touch;
    double t = run_batches(st, job, [&] {
        if (touch) fill(buf, size_t(job.rank) * size, size, job.rank);
        CHECK(job, oobx_allgather(job.comm, buf.data(), size));
    });
    set_size_counters(st, size, t, double(n) * double(size), double(n - 1) / double(n));
}

std::vector<int> group_members(int n)
{
    int g = n < 4 ? n : n / 2;
    std::vector<int> ranks;
    for (int i = 0; i < g; i++)
        ranks.push_back(i);
    return ranks;
}

void bm_group_allgather(benchmark::State &st, Job &job, size_t size)
{
    std::vector<int> members = group_members(job.nranks);
    const int g = int(members.size());
    const bool in = job.rank < g;
    Buffer buf(job, size_t(g) * size);
    if (in)
        fill(buf, size_t(job.rank) * size, size, job.rank);
    double t = run_batches(st, job, [&] {
        if (in)
            CHECK(job, oobx_group_allgather(job.comm, members.data(), g, buf.data(), size));
    });
    st.counters["group"] = g;
    set_size_counters(st, size, t, double(g) * double(size), double(g - 1) / double(g));
}

void bm_bcast(benchmark::State &st, Job &job, size_t size)
{
    Buffer buf(job, size);
    if (job.rank == 0)
        fill(buf, 0, size, 0);
    double t = run_batches(st, job, [&] { CHECK(job, oobx_bcast(job.comm, 0, buf.data(), size)); });
    set_size_counters(st, size, t, double(size), 1.0);
}

void bm_barrier(benchmark::State &st, Job &job)
{
    double t = run_batches(st, job, [&] { CHECK(job, oobx_barrier(job.comm)); });
    st.counters["lat_us"] = t * 1e6;
}

void bm_pingpong(benchmark::State &st, Job &job, size_t size)
{
    std::vector<char> buf(size);
    double t = run_batches(st, job, [&] {
        if (job.rank == 0) {
            CHECK(job, oobx_send(job.comm, 1, TAG_PING, buf.data(), size));
            CHECK(job, oobx_recv(job.comm, 1, TAG_PING, buf.data(), size, nullptr));
        } else if (job.rank == 1) {
            CHECK(job, oobx_recv(job.comm, 0, TAG_PING, buf.data(), size, nullptr));
            CHECK(job, oobx_send(job.comm, 0, TAG_PING, buf.data(), size));
        }
    }, 2.0);
    // the op is a round trip; report one-way latency (OSU), keep the round trip
    st.SetLabel("one-way");
    st.counters["rtt_us"] = t * 1e6;
    set_size_counters(st, size, t / 2, double(size), 1.0);
}

void bm_stream(benchmark::State &st, Job &job, size_t size)
{
    std::vector<char> buf(size);
    char ack[4] = {0, 0, 0, 0};
    const int w = job.opt.window;
    double t = run_batches(st, job, [&] {
        if (job.rank == 0) {
            for (int i = 0; i < w; i++)
                CHECK(job, oobx_send(job.comm, 1, TAG_STREAM, buf.data(), size));
            CHECK(job, oobx_recv(job.comm, 1, TAG_ACK, ack, sizeof ack, nullptr));
        } else if (job.rank == 1) {
            for (int i = 0; i < w; i++)
                CHECK(job, oobx_recv(job.comm, 0, TAG_STREAM, buf.data(), size, nullptr));
            CHECK(job, oobx_send(job.comm, 0, TAG_ACK, ack, sizeof ack));
        }
    }, double(w));
    st.counters["window"] = w;
    double per_msg = t / double(w);
    set_size_counters(st, size, per_msg, double(size), 1.0);
}

// ---- raw TCP ping-pong over loopback: the references for the socket transport ----
// Blocking: read and write sleep in the kernel until data or room arrives, as
// oobx does. Polling: non-blocking calls (MSG_DONTWAIT) retried at once, so
// the process never sleeps and the wake-up is gone from the round trip: the
// floor of what loopback TCP can do while a core per rank is free. Between
// tries it yields the processor (as Open MPI's mpi_yield_when_idle does): a
// no-op on a core of its own, and on a shared one the peer gets to run
// instead of waiting for the end of the spinner's time slice.

enum class Wait { block, poll };

void write_all(const Job &job, int fd, const char *p, size_t len, Wait wait)
{
    const int flags = MSG_NOSIGNAL | (wait == Wait::poll ? MSG_DONTWAIT : 0);
    while (len > 0) {
        ssize_t k = send(fd, p, len, flags);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && wait == Wait::poll && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            sched_yield();
            continue;
        }
        if (k <= 0)
            fail_errno(job, "tcp reference: send");
        p += k;
        len -= size_t(k);
    }
}

void read_all(const Job &job, int fd, char *p, size_t len, Wait wait)
{
    const int flags = wait == Wait::poll ? MSG_DONTWAIT : 0;
    while (len > 0) {
        ssize_t k = recv(fd, p, len, flags);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && wait == Wait::poll && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            sched_yield();
            continue;
        }
        if (k <= 0) {
            if (k == 0)
                errno = ECONNRESET;
            fail_errno(job, "tcp reference: recv");
        }
        p += k;
        len -= size_t(k);
    }
}

// Rank 1 listens on 127.0.0.1, sends its port over oobx, rank 0 connects.
int tcp_pair_open(Job &job)
{
    int one = 1;
    if (job.rank == 1) {
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0)
            fail_errno(job, "tcp reference: socket");
        struct sockaddr_in sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof sa;
        if (bind(lfd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 || listen(lfd, 1) != 0 ||
            getsockname(lfd, reinterpret_cast<sockaddr *>(&sa), &sl) != 0)
            fail_errno(job, "tcp reference: bind/listen on 127.0.0.1");
        uint16_t port = sa.sin_port;
        CHECK(job, oobx_send(job.comm, 0, TAG_PORT, &port, sizeof port));
        int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0)
            fail_errno(job, "tcp reference: accept");
        close(lfd);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return fd;
    }
    if (job.rank == 0) {
        uint16_t port = 0;
        CHECK(job, oobx_recv(job.comm, 1, TAG_PORT, &port, sizeof port, nullptr));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            fail_errno(job, "tcp reference: socket");
        struct sockaddr_in sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = port;
        if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
            fail_errno(job, "tcp reference: connect to 127.0.0.1");
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return fd;
    }
    return -1;
}

void bm_tcp_pingpong(benchmark::State &st, Job &job, size_t size, Wait wait)
{
    int fd = tcp_pair_open(job);
    std::vector<char> buf(size);
    double t = run_batches(st, job, [&] {
        if (job.rank == 0) {
            write_all(job, fd, buf.data(), size, wait);
            read_all(job, fd, buf.data(), size, wait);
        } else if (job.rank == 1) {
            read_all(job, fd, buf.data(), size, wait);
            write_all(job, fd, buf.data(), size, wait);
        }
    }, 2.0);
    if (fd >= 0)
        close(fd);
    st.SetLabel(wait == Wait::poll ? "one-way, busy-polling" : "one-way, blocking");
    st.counters["rtt_us"] = t * 1e6;
    set_size_counters(st, size, t / 2, double(size), 1.0);
}

// ---- communicator life cycle ----------------------------------------------------

void bm_comm_init(benchmark::State &st, Job &job)
{
    double t = run_batches(st, job, [&] {
        oobx_unique_id_t id;
        std::memset(&id, 0, sizeof id);
        if (job.rank == 0)
            CHECK(job, oobx_get_unique_id(&id));
        CHECK(job, oobx_bcast(job.comm, 0, &id, sizeof id));
        oobx_comm_t c = nullptr;
        CHECK(job, oobx_comm_init(&c, job.nranks, job.rank, 1, &id, nullptr));
        // every rank through init before any destroys: a rank that destroys
        // its new communicator while a peer still finishes init can make
        // that peer's init fail (--init-no-barrier shows it)
        if (!job.opt.init_no_barrier)
            CHECK(job, oobx_barrier(job.comm));
        CHECK(job, oobx_comm_destroy(c));
    });
    st.counters["lat_us"] = t * 1e6;
}

void bm_comm_split(benchmark::State &st, Job &job)
{
    double t = run_batches(st, job, [&] {
        oobx_comm_t child = nullptr;
        CHECK(job, oobx_comm_split(job.comm, job.rank % 2, job.rank, &child));
        CHECK(job, oobx_comm_destroy(child));
    });
    st.counters["lat_us"] = t * 1e6;
}

// ---- reporting ------------------------------------------------------------------
// Google Benchmark's own reporters do not fit these runs: its console table
// writes counters with SI suffixes (0.000479 GB/s as "479u"), its CPU time is
// per iteration (a whole batch, barriers included) while the real time is per
// operation, and its JSON context holds every added value as a string. These
// two print the same runs with plain units and per-operation times.

// What the run is, for the header of the table and the JSON context.
struct RunInfo {
    std::string version, transport, variant, algo, ucx_tls;
    int ranks = 0;
    Options opt;
    size_t name_width = 0;
};

double unit_per_s(benchmark::TimeUnit u)
{
    switch (u) {
    case benchmark::kNanosecond: return 1e9;
    case benchmark::kMicrosecond: return 1e6;
    case benchmark::kMillisecond: return 1e3;
    case benchmark::kSecond: return 1.0;
    }
    return 1e6;
}

bool is_ratio(const benchmark::BenchmarkReporter::Run &r)
{
    return r.run_type == benchmark::BenchmarkReporter::Run::RT_Aggregate &&
           r.aggregate_unit == benchmark::kPercentage;
}

double counter(const benchmark::BenchmarkReporter::Run &r, const char *name, double def)
{
    auto it = r.counters.find(name);
    return it == r.counters.end() ? def : double(it->second);
}

// Real and CPU time of one operation in the run's time unit (a ratio for a
// coefficient of variation). The per-operation CPU time travels as the
// cpu_us counter (run_batches).
double run_real(const benchmark::BenchmarkReporter::Run &r)
{
    return is_ratio(r) ? r.real_accumulated_time : r.GetAdjustedRealTime();
}

double run_cpu(const benchmark::BenchmarkReporter::Run &r)
{
    double us = counter(r, "cpu_us", -1);
    if (us < 0)
        return is_ratio(r) ? r.cpu_accumulated_time : r.GetAdjustedCPUTime();
    return is_ratio(r) ? us : us * 1e-6 * unit_per_s(r.time_unit);
}

std::string strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

// 3 or 4 significant digits, no exponent
std::string digits(double v)
{
    double a = std::fabs(v);
    return strf(a < 10 ? "%.3f" : a < 100 ? "%.2f" : a < 1000 ? "%.1f" : "%.0f", v);
}

std::string plain_time(double us)
{
    if (!std::isfinite(us))
        return "-";
    if (std::fabs(us) < 1000)
        return digits(us) + " µs";
    if (std::fabs(us) < 1e6)
        return digits(us / 1e3) + " ms";
    return digits(us / 1e6) + " s";
}

std::string plain_bw(double gbps)
{
    if (!std::isfinite(gbps))
        return "-";
    // small messages: enough decimals to see more than zero
    return (gbps != 0 && std::fabs(gbps) < 0.01 ? strf("%.6f", gbps) : digits(gbps)) + " GB/s";
}

std::string plain_bytes(double b)
{
    auto n = (unsigned long long)b;
    if (n >= (1ull << 20) && n % (1ull << 20) == 0)
        return strf("%llu MiB", n >> 20);
    if (n >= (1ull << 10) && n % (1ull << 10) == 0)
        return strf("%llu KiB", n >> 10);
    return strf("%llu B", n);
}

// Characters on the terminal, not bytes: "µ" is two bytes of UTF-8.
size_t columns(const std::string &s)
{
    size_t n = 0;
    for (unsigned char c : s)
        n += (c & 0xc0) != 0x80;
    return n;
}

std::string pad_left(const std::string &s, size_t w)
{
    size_t n = columns(s);
    return n >= w ? s : std::string(w - n, ' ') + s;
}

std::string pad_right(const std::string &s, size_t w)
{
    size_t n = columns(s);
    return n >= w ? s : s + std::string(w - n, ' ');
}

std::string run_title(const benchmark::BenchmarkReporter::Run &r)
{
    std::string name = r.run_name.function_name;
    if (r.run_type == benchmark::BenchmarkReporter::Run::RT_Aggregate)
        name += "_" + r.aggregate_name;
    return name;
}

// The console table: one line per benchmark, times per operation.
class TableReporter : public benchmark::BenchmarkReporter {
public:
    explicit TableReporter(const RunInfo &info) : info_(info) {}

    bool ReportContext(const Context &ctx) override
    {
        std::ostream &out = GetOutputStream();
        const benchmark::CPUInfo &cpu = ctx.cpu_info;
        std::string load;
        for (double l : cpu.load_avg)
            load += strf(" %.2f", l);
        out << strf("oobx-bench: oobx %s, transport %s (variant %s), %d ranks, allgather algorithm %s%s%s\n",
                    info_.version.c_str(), info_.transport.c_str(), info_.variant.c_str(), info_.ranks,
                    info_.algo.c_str(), info_.ucx_tls.empty() ? "" : ", UCX_TLS=",
                    info_.ucx_tls.c_str())
            << strf("host %s, %d CPUs, load average%s\n", ctx.sys_info.name.c_str(), cpu.num_cpus,
                    load.empty() ? " unknown" : load.c_str())
            << strf("%d batches of about %g ms per benchmark; per operation: time = batch time "
                    "(maximum over ranks) / operations,\n"
                    "best = the same in the best batch, cpu = process CPU time (maximum over ranks) / "
                    "operations; GB/s = 1e9 bytes/s\n",
                    info_.opt.batches, info_.opt.batch_ms);
        width_ = std::max<size_t>(info_.name_width, 9);
        std::string head = pad_right("benchmark", width_) + pad_left("size", 9) + pad_left("time", 12) +
                           pad_left("best", 12) + pad_left("cpu", 12) + pad_left("algbw", 15) +
                           pad_left("busbw", 15) + pad_left("ops", 9) + "  note";
        out << head << "\n" << std::string(columns(head), '-') << "\n";
        out.flush();
        return true;
    }

    void ReportRuns(const std::vector<Run> &runs) override
    {
        std::ostream &out = GetOutputStream();
        for (const Run &r : runs) {
            std::string line = pad_right(run_title(r), width_);
            if (r.error_occurred) {
                out << line << "  failed: " << r.error_message << "\n";
                continue;
            }
            double bytes = counter(r, "bytes", -1);
            const bool sized = bytes >= 0;
            const double to_us = 1e6 / unit_per_s(r.time_unit);
            auto time_col = [&](double v_us) {
                return is_ratio(r) ? digits(v_us * 100) + " %" : plain_time(v_us);
            };
            line += pad_left(sized ? plain_bytes(bytes) : "", 9);
            line += pad_left(time_col(is_ratio(r) ? run_real(r) : run_real(r) * to_us), 12);
            double best = counter(r, "min_us", NAN);
            line += pad_left(is_ratio(r) ? digits(best * 100) + " %" : plain_time(best), 12);
            line += pad_left(time_col(is_ratio(r) ? run_cpu(r) : run_cpu(r) * to_us), 12);
            line += pad_left(sized ? plain_bw(counter(r, "algbw_GBps", NAN)) : "", 15);
            line += pad_left(sized ? plain_bw(counter(r, "busbw_GBps", NAN)) : "", 15);
            line += pad_left(strf("%.0f", counter(r, "ops", 0)), 9);
            std::string note = r.report_label;
            auto add = [&](const std::string &s) { note += (note.empty() ? "" : ", ") + s; };
            if (r.counters.count("rtt_us"))
                add("round trip " + plain_time(counter(r, "rtt_us", 0)));
            if (r.counters.count("window"))
                add(strf("window %.0f", counter(r, "window", 0)));
            if (r.counters.count("group"))
                add(strf("group of %.0f", counter(r, "group", 0)));
            out << line << (note.empty() ? "" : "  " + note) << "\n";
        }
        out.flush();
    }

private:
    RunInfo info_;
    size_t width_ = 9;
};

std::string json_str(const std::string &s)
{
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\')
            o += '\\', o += char(c);
        else if (c < 0x20)
            o += strf("\\u%04x", c);
        else
            o += char(c);
    }
    return o + "\"";
}

std::string json_num(double v)
{
    return std::isfinite(v) ? strf("%.10g", v) : "null";
}

// Google Benchmark's JSON layout (context, then benchmarks), with the
// per-operation cpu_time and every number a JSON number. Each run is
// flushed as it is reported: a run cut short leaves the results so far
// (bench/results.py reads such a file).
class JsonReporter : public benchmark::BenchmarkReporter {
public:
    explicit JsonReporter(const RunInfo &info) : info_(info) {}

    bool ReportContext(const Context &ctx) override
    {
        const benchmark::CPUInfo &cpu = ctx.cpu_info;
        char date[64] = "";
        time_t now = time(nullptr);
        struct tm tm;
        if (localtime_r(&now, &tm) && strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", &tm)) {
            size_t n = std::strlen(date); // +0000 -> +00:00, as ISO 8601 writes it
            if (n >= 5) {
                std::memmove(date + n - 1, date + n - 2, 3);
                date[n - 2] = ':';
            }
        }
        std::string caches;
        for (const auto &c : cpu.caches)
            caches += strf("%s\n      {\"type\": %s, \"level\": %d, \"size\": %d, \"num_sharing\": %d}",
                           caches.empty() ? "" : ",", json_str(c.type).c_str(), c.level, c.size,
                           c.num_sharing);
        std::string load, sizes;
        for (double l : cpu.load_avg)
            load += (load.empty() ? "" : ", ") + json_num(l);
        for (size_t s : info_.opt.sizes)
            sizes += (sizes.empty() ? "" : ", ") + strf("%zu", s);
        std::ostream &out = GetOutputStream();
        out << "{\n  \"context\": {\n"
            << "    \"date\": " << json_str(date) << ",\n"
            << "    \"host_name\": " << json_str(ctx.sys_info.name) << ",\n"
            << "    \"executable\": " << json_str(Context::executable_name ? Context::executable_name : "")
            << ",\n"
            << "    \"num_cpus\": " << cpu.num_cpus << ",\n"
            << "    \"mhz_per_cpu\": " << json_num(std::round(cpu.cycles_per_second / 1e6)) << ",\n"
            << "    \"cpu_scaling_enabled\": "
            << (cpu.scaling == benchmark::CPUInfo::ENABLED ? "true" : "false") << ",\n"
            << "    \"caches\": [" << caches << (caches.empty() ? "" : "\n    ") << "],\n"
            << "    \"load_avg\": [" << load << "],\n"
            << "    \"impl\": \"oobx\",\n"
            << "    \"oobx_version\": " << json_str(info_.version) << ",\n"
            << "    \"transport\": " << json_str(info_.transport) << ",\n"
            << "    \"variant\": " << json_str(info_.variant) << ",\n"
            << "    \"ranks\": " << info_.ranks << ",\n"
            << "    \"algo\": " << json_str(info_.algo) << ",\n"
            << "    \"ucx_tls\": " << json_str(info_.ucx_tls) << ",\n"
            << "    \"batches\": " << info_.opt.batches << ",\n"
            << "    \"batch_ms\": " << json_num(info_.opt.batch_ms) << ",\n"
            << "    \"window\": " << info_.opt.window << ",\n"
            << "    \"max_buffer\": " << info_.opt.max_buffer << ",\n"
            << "    \"sizes\": [" << sizes << "]\n"
            << "  },\n  \"benchmarks\": [\n";
        out.flush();
        return true;
    }

    void ReportRuns(const std::vector<Run> &runs) override
    {
        std::ostream &out = GetOutputStream();
        for (const Run &r : runs) {
            const bool agg = r.run_type == Run::RT_Aggregate;
            std::string e = first_ ? "" : ",\n";
            first_ = false;
            auto kv = [&](const char *k, const std::string &v) {
                e += strf("      \"%s\": ", k) + v + ",\n";
            };
            e += "    {\n";
            kv("name", json_str(r.benchmark_name()));
            kv("family_index", strf("%lld", (long long)r.family_index));
            kv("per_family_instance_index", strf("%lld", (long long)r.per_family_instance_index));
            kv("run_name", json_str(r.run_name.str()));
            kv("run_type", agg ? "\"aggregate\"" : "\"iteration\"");
            kv("repetitions", strf("%lld", (long long)r.repetitions));
            if (!agg)
                kv("repetition_index", strf("%lld", (long long)r.repetition_index));
            kv("threads", strf("%lld", (long long)r.threads));
            if (agg) {
                kv("aggregate_name", json_str(r.aggregate_name));
                kv("aggregate_unit", is_ratio(r) ? "\"percentage\"" : "\"time\"");
            }
            if (r.error_occurred) {
                kv("error_occurred", "true");
                kv("error_message", json_str(r.error_message));
            }
            kv("iterations", strf("%lld", (long long)r.iterations));
            kv("real_time", json_num(run_real(r)));
            kv("cpu_time", json_num(run_cpu(r)));
            if (!is_ratio(r))
                kv("time_unit", json_str(benchmark::GetTimeUnitString(r.time_unit)));
            if (!r.report_label.empty())
                kv("label", json_str(r.report_label));
            for (const auto &c : r.counters)
                kv(c.first.c_str(), json_num(double(c.second)));
            e.erase(e.size() - 2); // the last ",\n"
            e += "\n    }";
            out << e;
        }
        out.flush();
    }

    void Finalize() override
    {
        GetOutputStream() << "\n  ]\n}\n";
        GetOutputStream().flush();
    }

private:
    RunInfo info_;
    bool first_ = true;
};

// ---- set-up ---------------------------------------------------------------------

class NullReporter : public benchmark::BenchmarkReporter {
public:
    bool ReportContext(const Context &) override { return true; }
    void ReportRuns(const std::vector<Run> &) override {}
};

bool bench_parse_size(const char *s, size_t *out)
{
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    if (*end != '\0')
        return false;
    *out = size_t(v);
    return true;
}

bool parse_sizes(const char *s, std::vector<size_t> *out)
{
    std::vector<size_t> v;
    std::string all(s);
    size_t pos = 0;
    while (pos <= all.size()) {
        size_t comma = all.find(',', pos);
        std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        size_t x;
        if (item.empty() || !bench_parse_size(item.c_str(), &x))
            return false;
        v.push_back(x);
        if (comma == std::string::npos)
            break;
        pos = comma + 1;
    }
    *out = v;
    return !v.empty();
}

// Takes our own options out of argv; returns false on a malformed one.
bool take_options(int *argc, char **argv, Options *opt)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        auto val = [&](const char *key) -> const char * {
            size_t k = std::strlen(key);
            return std::strncmp(a, key, k) == 0 ? a + k : nullptr;
        };
        const char *v;
        bool ok = true;
        if ((v = val("--sizes=")))
            ok = parse_sizes(v, &opt->sizes);
        else if ((v = val("--batches=")))
            ok = (opt->batches = std::atoi(v)) > 0;
        else if ((v = val("--batch-ms=")))
            ok = (opt->batch_ms = std::atof(v)) > 0;
        else if ((v = val("--max-inner=")))
            ok = (opt->max_inner = std::atol(v)) > 0;
        else if ((v = val("--max-buffer=")))
            ok = bench_parse_size(v, &opt->max_buffer) && opt->max_buffer > 0;
        else if ((v = val("--window=")))
            ok = (opt->window = std::atoi(v)) > 0;
        else if ((v = val("--variant=")))
            opt->variant = v;
        else if (std::strcmp(a, "--init-no-barrier") == 0)
            opt->init_no_barrier = true;
        else if ((v = val("--alloc=")))
            ok = (opt->oobx_mem = std::strcmp(v, "oobx") == 0) || std::strcmp(v, "malloc") == 0;
        else if (std::strcmp(a, "--touch") == 0)
            opt->touch = true;
        else {
            argv[out++] = argv[i];
            continue;
        }
        if (!ok) {
            std::fprintf(stderr, "oobx-bench: bad option '%s'\n", a);
            return false;
        }
    }
    *argc = out;
    argv[out] = nullptr;
    return true;
}

// Ranks other than 0 drop the output-file flags: rank 0 alone writes.
void drop_output_flags(int *argc, char **argv)
{
    int out = 1;
    for (int i = 1; i < *argc; i++)
        if (std::strncmp(argv[i], "--benchmark_out", 15) != 0)
            argv[out++] = argv[i];
    *argc = out;
    argv[out] = nullptr;
}

// Registers every benchmark that fits; returns the longest name.
size_t register_all(Job &job)
{
    const Options &o = job.opt;
    size_t longest = 0;
    auto reg = [&](const std::string &name, auto fn) {
        longest = std::max(longest, name.size());
        benchmark::RegisterBenchmark(name.c_str(), fn)
            ->UseManualTime()
            ->Iterations(o.batches)
            ->Unit(benchmark::kMicrosecond);
    };
    Job *j = &job;
    auto fits = [&](size_t size, int parts) {
        return double(size) * double(parts) <= double(o.max_buffer);
    };
    for (size_t s : o.sizes)
        if (fits(s, job.nranks))
            reg("allgather/" + std::to_string(s),
                [j, s](benchmark::State &st) { bm_allgather(st, *j, s); });
    for (size_t s : o.sizes)
        if (fits(s, int(group_members(job.nranks).size())))
            reg("group_allgather/" + std::to_string(s),
                [j, s](benchmark::State &st) { bm_group_allgather(st, *j, s); });
    for (size_t s : o.sizes)
        if (fits(s, 1))
            reg("bcast/" + std::to_string(s), [j, s](benchmark::State &st) { bm_bcast(st, *j, s); });
    reg("barrier", [j](benchmark::State &st) { bm_barrier(st, *j); });
    if (job.nranks >= 2) {
        for (size_t s : o.sizes)
            if (fits(s, 1))
                reg("pingpong/" + std::to_string(s),
                    [j, s](benchmark::State &st) { bm_pingpong(st, *j, s); });
        for (size_t s : o.sizes)
            if (fits(s, 1))
                reg("tcp_pingpong/" + std::to_string(s),
                    [j, s](benchmark::State &st) { bm_tcp_pingpong(st, *j, s, Wait::block); });
        for (size_t s : o.sizes)
            if (fits(s, 1))
                reg("tcp_poll_pingpong/" + std::to_string(s),
                    [j, s](benchmark::State &st) { bm_tcp_pingpong(st, *j, s, Wait::poll); });
        for (size_t s : o.sizes)
            if (fits(s, o.window))
                reg("stream_bw/" + std::to_string(s),
                    [j, s](benchmark::State &st) { bm_stream(st, *j, s); });
    }
    reg("comm_split", [j](benchmark::State &st) { bm_comm_split(st, *j); });
    reg("comm_init", [j](benchmark::State &st) { bm_comm_init(st, *j); });
    return longest;
}

const char *env_or(const char *name, const char *def)
{
    const char *v = std::getenv(name);
    return v && *v ? v : def;
}

// The value of Google Benchmark's --NAME=VALUE (or -NAME=VALUE), the last one
// given, else def: read before benchmark::Initialize takes the flags out.
std::string gb_flag(int argc, char **argv, const char *name, const char *def)
{
    std::string v = def;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        a += a[0] == '-' ? (a[1] == '-' ? 2 : 1) : 0;
        size_t n = std::strlen(name);
        if (a != argv[i] && std::strncmp(a, name, n) == 0 && a[n] == '=')
            v = a + n + 1;
    }
    return v;
}

bool wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-help") || !std::strcmp(argv[i], "-h"))
            return true;
    return false;
}

void print_help()
{
    const Options d;
    std::printf(
        "usage: oobx-run -n N [--transport T] -- oobx-bench [OPTION...]\n"
        "       (or under srun, mpirun, mpiexec, torchrun: every rank runs it, with the same options)\n"
        "\n"
        "Google Benchmark benchmarks of oobx: allgather, group_allgather, bcast, barrier,\n"
        "pingpong, stream_bw, comm_split, comm_init, and the raw TCP ping-pongs of the\n"
        "same two ranks (tcp_pingpong blocking, tcp_poll_pingpong busy-polling). Rank 0\n"
        "prints the table and writes --benchmark_out; times are per operation, the batch\n"
        "time (maximum over ranks) divided by the operations of the batch.\n"
        "\n"
        "  --sizes=LIST        message sizes, bytes with K/M suffixes (default 8,16,64,...,4M)\n"
        "  --batches=N         timed batches per benchmark (default %d)\n"
        "  --batch-ms=MS       about how long a batch runs (default %g)\n"
        "  --max-inner=N       at most N operations a batch (default %ld)\n"
        "  --max-buffer=BYTES  skip sizes whose buffer (ranks x size) is larger (default %zu MiB)\n"
        "  --window=N          messages in flight in stream_bw (default %d)\n"
        "  --variant=NAME      a label for the report (default: the transport)\n"
        "  --init-no-barrier   comm_init destroys without waiting for every rank\n"
        "  --alloc=malloc|oobx where the allgather and bcast buffers live: plain memory (default) or\n"
        "                      oobx_mem_alloc's, which ranks of one host copy from directly\n"
        "  --touch             allgather: every rank rewrites its slice before each call, as a program\n"
        "                      that gathers new data does (the time includes that memset)\n"
        "  --benchmark_format=console|json         what rank 0 prints (default console)\n"
        "  --benchmark_out=FILE --benchmark_out_format=json|console   rank 0 writes FILE\n"
        "  -h, --help          this text (needs no job)\n"
        "Environment: OOBX_TRANSPORT=auto|socket|ucx|verbs, OOBX_ALLGATHER_ALGO, UCX_TLS, and\n"
        "the rank and size (oobx-run, Slurm, Open MPI, PMI, torchrun set them).\n"
        "\n"
        "Google Benchmark's own options (--benchmark_min_time has no effect here: the\n"
        "iteration count is --batches, the same on every rank):\n",
        d.batches, d.batch_ms, d.max_inner, d.max_buffer >> 20, d.window);
    std::fflush(stdout);
    benchmark::PrintDefaultHelp();
    std::fflush(stdout);
}

// A reporter for a --benchmark_format or --benchmark_out_format value, or
// nullptr for one this program does not write.
std::unique_ptr<benchmark::BenchmarkReporter> make_reporter(const std::string &format, const RunInfo &info)
{
    if (format == "console")
        return std::unique_ptr<benchmark::BenchmarkReporter>(new TableReporter(info));
    if (format == "json")
        return std::unique_ptr<benchmark::BenchmarkReporter>(new JsonReporter(info));
    return nullptr;
}

} // namespace

int main(int argc, char **argv)
{
    if (wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    Job job;
    if (!take_options(&argc, argv, &job.opt))
        return 1;
    const std::string display_format = gb_flag(argc, argv, "benchmark_format", "console");
    const std::string file_format = gb_flag(argc, argv, "benchmark_out_format", "json");
    const bool to_file = !gb_flag(argc, argv, "benchmark_out", "").empty();
    for (const std::string *f : {&display_format, &file_format})
        if (*f != "console" && *f != "json") {
            std::fprintf(stderr, "oobx-bench: format '%s' is not written here (console or json)\n", f->c_str());
            return 1;
        }

    int rc = oobx_comm_init_from_env(&job.comm, nullptr);
    if (rc != OOBX_SUCCESS) {
        std::fprintf(stderr,
                     "oobx-bench: init failed: %s: %s\n"
                     "oobx-bench: it runs on every rank of a job (oobx-run -n 2 -- oobx-bench, srun, "
                     "mpirun); --help lists its options\n",
                     oobx_error_name(rc), oobx_last_error());
        return 2;
    }
    // oobx_get_unique_id, like NCCL's, binds its root to OOBX_COMM_ID when it
    // is set; the comm_init benchmark wants fresh roots on free ports
    unsetenv("OOBX_COMM_ID");
    CHECK(job, oobx_comm_rank(job.comm, &job.rank));
    CHECK(job, oobx_comm_size(job.comm, &job.nranks));

    if (job.rank != 0)
        drop_output_flags(&argc, argv);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 1;

    const char *transport = oobx_comm_transport(job.comm);
    RunInfo info;
    info.version = oobx_version();
    info.transport = transport ? transport : "?";
    info.variant = job.opt.variant.empty() ? info.transport : job.opt.variant;
    info.algo = env_or("OOBX_ALLGATHER_ALGO", "auto");
    info.ucx_tls = env_or("UCX_TLS", "");
    info.ranks = job.nranks;
    info.opt = job.opt;
    info.name_width = register_all(job);
    try {
        if (job.rank == 0) {
            auto display = make_reporter(display_format, info);
            auto file = to_file ? make_reporter(file_format, info) : nullptr;
            benchmark::RunSpecifiedBenchmarks(display.get(), file.get());
        } else {
            NullReporter quiet;
            benchmark::RunSpecifiedBenchmarks(&quiet);
        }
        benchmark::Shutdown();
        CHECK(job, oobx_barrier(job.comm));
        CHECK(job, oobx_comm_destroy(job.comm));
    } catch (const BenchFailure &) {
        return 2; // the communicator may be unusable: no destroy
    }
    return 0;
}
