// oobx-bench: Google Benchmark benchmarks of oobx, run on every rank of a job.
//
//   oobx-run -n 8 -- build/bin/oobx-bench [--sizes=8,1024] [--batches=5]
//            [--batch-ms=30] [--max-buffer=BYTES] [--window=64] [--variant=NAME]
//            [--benchmark_filter=REGEX] [--benchmark_out=FILE --benchmark_out_format=json]
//
// Every benchmark iteration is one batch of operations. The batch size is
// chosen from a warm-up whose time is the maximum over ranks, so every rank
// computes the same count and runs the same number of operations; Google
// Benchmark's own adaptive count differs between processes and would
// deadlock. The time reported for an operation is the batch time, maximum
// over ranks, divided by the operations in the batch (manual timing). Rank 0
// prints the table and writes the JSON file; the other ranks report nothing.
//
// Conventions (OSU micro-benchmarks and nccl-tests): an allgather's size is
// bytes per rank; algbw = nranks * size / t, busbw = algbw * (n - 1) / n, in
// GB/s (1e9 bytes per second); ping-pong latency is half the round trip.

#include <benchmark/benchmark.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
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

// Runs op in batches; returns the mean time of one op in seconds (maximum over
// ranks of each batch). Every rank must call this with the same arguments.
// The time reported for an iteration is the op's time divided by per_op_div
// (2 for a round trip reported one-way, the window for a stream).
template <class Op>
double run_batches(benchmark::State &st, Job &job, Op &&op, double per_op_div = 1.0)
{
    CHECK(job, oobx_barrier(job.comm));
    op(); // first use: lazy connections, page faults
    // probe with 1, 10, 100... ops until a probe lasts 2 ms: the decision is
    // taken on the maximum over ranks, so every rank takes the same
    long probe = 1;
    double t0, warm;
    for (;;) {
        CHECK(job, oobx_barrier(job.comm));
        t0 = now_s();
        for (long i = 0; i < probe; i++)
            op();
        warm = max_over_ranks(job, now_s() - t0) / double(probe);
        if (warm * double(probe) >= 2e-3 || probe >= job.opt.max_inner)
            break;
        probe *= 10;
    }
    long inner = 1;
    if (warm > 0)
        inner = long(job.opt.batch_ms * 1e-3 / warm);
    inner = std::max(1L, std::min(inner, job.opt.max_inner));

    double total = 0, best = 0;
    long ops = 0;
    for (auto _ : st) {
        CHECK(job, oobx_barrier(job.comm));
        t0 = now_s();
        for (long i = 0; i < inner; i++)
            op();
        double dt = max_over_ranks(job, now_s() - t0);
        double per_op = dt / double(inner) / per_op_div;
        st.SetIterationTime(per_op);
        best = ops == 0 || per_op < best ? per_op : best;
        total += dt;
        ops += inner;
    }
    st.counters["ops"] = double(ops);
    st.counters["min_us"] = best * 1e6; // the best batch: less sensitive to other load
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

void fill(std::vector<char> &buf, size_t off, size_t len, int who)
{
    std::memset(buf.data() + off, (who * 37 + 11) & 0xff, len);
}

bool slice_ok(const std::vector<char> &buf, size_t off, size_t len, int who)
{
    char want = char((who * 37 + 11) & 0xff);
    return len == 0 || (buf[off] == want && buf[off + len - 1] == want &&
                        buf[off + len / 2] == want);
}

// ---- the benchmarks ------------------------------------------------------------

void bm_allgather(benchmark::State &st, Job &job, size_t size)
{
    const int n = job.nranks;
    std::vector<char> buf(size_t(n) * size);
    fill(buf, size_t(job.rank) * size, size, job.rank);
    CHECK(job, oobx_allgather(job.comm, buf.data(), size));
    for (int r = 0; r < n; r++)
        if (!slice_ok(buf, size_t(r) * size, size, r)) {
            std::fprintf(stderr, "oobx-bench: rank %d: allgather of %zu B: slice of rank %d is wrong\n",
                         job.rank, size, r);
            throw BenchFailure{};
        }
    double t = run_batches(st, job, [&] { CHECK(job, oobx_allgather(job.comm, buf.data(), size)); });
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
    std::vector<char> buf(size_t(g) * size);
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
    std::vector<char> buf(size);
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

// ---- raw TCP ping-pong over loopback: the reference for the socket transport ----

void write_all(const Job &job, int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fail_errno(job, "tcp reference: write");
        p += k;
        len -= size_t(k);
    }
}

void read_all(const Job &job, int fd, char *p, size_t len)
{
    while (len > 0) {
        ssize_t k = read(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = ECONNRESET;
            fail_errno(job, "tcp reference: read");
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

void bm_tcp_pingpong(benchmark::State &st, Job &job, size_t size)
{
    int fd = tcp_pair_open(job);
    std::vector<char> buf(size);
    double t = run_batches(st, job, [&] {
        if (job.rank == 0) {
            write_all(job, fd, buf.data(), size);
            read_all(job, fd, buf.data(), size);
        } else if (job.rank == 1) {
            read_all(job, fd, buf.data(), size);
            write_all(job, fd, buf.data(), size);
        }
    }, 2.0);
    if (fd >= 0)
        close(fd);
    st.SetLabel("one-way");
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

void register_all(Job &job)
{
    const Options &o = job.opt;
    auto reg = [&](const std::string &name, auto fn) {
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
                    [j, s](benchmark::State &st) { bm_tcp_pingpong(st, *j, s); });
        for (size_t s : o.sizes)
            if (fits(s, o.window))
                reg("stream_bw/" + std::to_string(s),
                    [j, s](benchmark::State &st) { bm_stream(st, *j, s); });
    }
    reg("comm_split", [j](benchmark::State &st) { bm_comm_split(st, *j); });
    reg("comm_init", [j](benchmark::State &st) { bm_comm_init(st, *j); });
}

const char *env_or(const char *name, const char *def)
{
    const char *v = std::getenv(name);
    return v && *v ? v : def;
}

} // namespace

int main(int argc, char **argv)
{
    Job job;
    if (!take_options(&argc, argv, &job.opt))
        return 1;

    int rc = oobx_comm_init_from_env(&job.comm, nullptr);
    if (rc != OOBX_SUCCESS) {
        std::fprintf(stderr, "oobx-bench: init failed: %s: %s\n", oobx_error_name(rc),
                     oobx_last_error());
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
    benchmark::AddCustomContext("impl", "oobx");
    benchmark::AddCustomContext("oobx_version", oobx_version());
    benchmark::AddCustomContext("transport", transport ? transport : "?");
    benchmark::AddCustomContext("variant", job.opt.variant.empty() ? (transport ? transport : "?")
                                                                      : job.opt.variant);
    benchmark::AddCustomContext("ranks", std::to_string(job.nranks));
    benchmark::AddCustomContext("algo", env_or("OOBX_ALLGATHER_ALGO", "auto"));
    benchmark::AddCustomContext("ucx_tls", env_or("UCX_TLS", ""));
    benchmark::AddCustomContext("batches", std::to_string(job.opt.batches));
    benchmark::AddCustomContext("batch_ms", std::to_string(job.opt.batch_ms));

    register_all(job);
    try {
        if (job.rank == 0) {
            benchmark::RunSpecifiedBenchmarks();
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
