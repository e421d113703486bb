// vtaforge Verilator harness for the generated `vta_core`.
//
// Compiled together with the Verilated model (prefix `Vvta_core`) into one shared library
// that Python drives through ctypes (see runtime/rtl/device.py).  No Python code runs per
// cycle: the run loop, the DRAM model and the AXI4-Lite register master are all here.
//
// Pieces:
//  * DRAM model: a byte-addressed memory acting as an AXI4 slave on the core's master port,
//    with independent read and write channels, optional random first-beat latency
//    (cycles, uniform in [lat_min, lat_max]) and random back-pressure (every ready/valid
//    the slave drives is withheld with probability bp on each cycle; a valid once raised is
//    held until its handshake, as AXI requires), all from a seeded xorshift generator.
//    It checks every burst: INCR only, beat-aligned address, size <= bus width, no 4 KiB
//    boundary crossing, entirely inside the DRAM image, WLAST exactly on the last beat,
//    and VALID held until READY on AR/AW/W.  A violation records an error message and
//    stops the run (the process is never aborted).
//  * AXI4-Lite master for the control registers (hw/regs.py), clock-sampled, with a
//    per-transaction timeout.
//  * run_until_done(max_cycles, poll): runs the clock, reads STATUS over AXI4-Lite every
//    `poll` cycles, and turns a run longer than max_cycles into a watchdog error that
//    carries dbg_state (decoded into unit-state names by the Python side).
//  * Speed: Verilator 5 re-evaluates every input-dependent combinational process (its
//    "ico" region: with a synchronous reset input that is most of the next-state logic)
//    at the start of every eval(), whether or not an input changed.  The build patches the
//    model's _eval so that this pass is skipped when vh_skip_ico is set, and tick() sets it
//    exactly when no input other than clk differs from the previous eval: the model was
//    settled for these inputs and this state by that eval, so the pass would recompute
//    the same values (bit-exact).  That always holds for the rising-edge eval, and for
//    the falling-edge eval whenever the harness drives nothing new (idle bus).
//  * Optional waveform: VCD in the variant built with --trace (VM_TRACE_VCD=1, no external
//    library), FST in the one built with --trace-fst (VM_TRACE_FST=1, zlib + lz4).
//
// C API: see the extern "C" block at the end.  Every function returning int returns 0 on
// success and a negative code on error (-1 bus/protocol error, -2 watchdog, -3 usage);
// vh_last_error() then holds a one-line message.
#include "Vvta_core.h"
#include "verilated.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
using VhTraceFile = VerilatedFstC;
#define VH_TRACE_KIND 2
#elif VM_TRACE_VCD
#include "verilated_vcd_c.h"
using VhTraceFile = VerilatedVcdC;
#define VH_TRACE_KIND 1
#else
#define VH_TRACE_KIND 0
#endif

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#ifndef VH_BUS_BYTES
#error "VH_BUS_BYTES (AXI master data width in bytes) must be defined"
#endif

static_assert(sizeof(((Vvta_core*)nullptr)->m_axi_rdata) == VH_BUS_BYTES,
              "m_axi_rdata width does not match VH_BUS_BYTES");

// Read by the patched Vvta_core___024root___eval (see build.py, _patch_skip_ico): when
// true, the input-combinational pass of that eval is skipped.  Per thread, so models in
// different threads do not interfere.
thread_local bool vh_skip_ico = false;

namespace {

constexpr uint32_t REG_STATUS = 0x04;
constexpr uint32_t STATUS_DONE = 1u << 1;
constexpr uint64_t LITE_TIMEOUT = 1000;  // cycles for one AXI4-Lite transaction
constexpr size_t MAX_OUTSTANDING = 8;    // accepted bursts per direction

enum { E_OK = 0, E_BUS = -1, E_WATCHDOG = -2, E_USAGE = -3 };

struct Burst {
    uint64_t addr;      // byte address of the first beat
    uint32_t beats;     // len + 1
    uint32_t size;      // bytes per beat (1 << AxSIZE)
    uint64_t ready_at;  // first cycle a beat (R) may be presented
    uint32_t done;      // beats transferred so far
};

template <typename T>
inline uint8_t* bytes_of(T& port) { return reinterpret_cast<uint8_t*>(&port); }

struct Harness {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vvta_core> top;
    std::vector<uint8_t> mem;
    uint64_t cycle = 0;
    std::string err;
    bool failed = false;

    // bus randomisation
    uint32_t lat_min = 0, lat_max = 0;
    uint64_t bp_threshold = 0;  // withhold when rng < threshold (threshold = p * 2^64)
    uint64_t rng = 0x9E3779B97F4A7C15ull;

    // DRAM slave state
    std::deque<Burst> rq, awq;
    std::deque<uint64_t> bq;  // cycle at which each pending B response may be sent
    bool ar_ready = false, aw_ready = false, w_ready = false;
    bool r_valid = false, b_valid = false;
    bool prev_arvalid = false, prev_awvalid = false, prev_wvalid = false;
    bool prev_ar_fire = true, prev_aw_fire = true, prev_w_fire = true;

    // AXI4-Lite master state
    bool l_aw = false, l_w = false, l_b = false, l_ar = false, l_r = false;
    uint32_t l_addr = 0, l_wdata = 0, l_rdata = 0;

    // inputs as last evaluated (false: the next eval runs the input-combinational pass)
    bool inputs_settled = false;
    uint64_t ico_skipped = 0;

    // statistics
    uint64_t st_rd_bursts = 0, st_wr_bursts = 0, st_rd_beats = 0, st_wr_beats = 0;

#if VH_TRACE_KIND
    std::unique_ptr<VhTraceFile> tfp;
#endif

    explicit Harness(uint64_t mem_size) : mem(mem_size, 0) {
        ctx = std::make_unique<VerilatedContext>();
#if VH_TRACE_KIND
        ctx->traceEverOn(true);
#endif
        top = std::make_unique<Vvta_core>(ctx.get(), "vta");
    }

    ~Harness() {
#if VH_TRACE_KIND
        if (tfp) tfp->close();
#endif
        top->final();
    }

    void fail(const char* fmt, ...) {
        if (failed) return;
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        char pre[64];
        snprintf(pre, sizeof pre, "cycle %llu: ", (unsigned long long)cycle);
        err = std::string(pre) + buf;
        failed = true;
    }

    uint64_t next_rand() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
    }
    bool pass() { return bp_threshold == 0 || next_rand() >= bp_threshold; }
    uint64_t latency() {
        if (lat_max <= lat_min) return lat_min;
        return lat_min + next_rand() % (uint64_t)(lat_max - lat_min + 1);
    }

    void clear_bus() {
        rq.clear();
        awq.clear();
        bq.clear();
        ar_ready = aw_ready = w_ready = r_valid = b_valid = false;
        prev_arvalid = prev_awvalid = prev_wvalid = false;
        prev_ar_fire = prev_aw_fire = prev_w_fire = true;
        l_aw = l_w = l_b = l_ar = l_r = false;
    }

    // Check one burst request; returns false (after fail()) when illegal.
    bool check_burst(const char* ch, uint64_t addr, uint32_t len, uint32_t size_log,
                     uint32_t burst) {
        uint32_t size = 1u << size_log;
        uint64_t nbytes = (uint64_t)(len + 1) * size;
        if (burst != 1) {
            fail("AXI %s burst at 0x%08llx: burst type %u, only INCR (1) is supported", ch,
                 (unsigned long long)addr, burst);
            return false;
        }
        if (size > VH_BUS_BYTES) {
            fail("AXI %s burst at 0x%08llx: beat size %u bytes exceeds the %d-byte bus", ch,
                 (unsigned long long)addr, size, VH_BUS_BYTES);
            return false;
        }
        if (addr % size) {
            fail("AXI %s burst at 0x%08llx: address not aligned to the %u-byte beat", ch,
                 (unsigned long long)addr, size);
            return false;
        }
        if ((addr >> 12) != ((addr + nbytes - 1) >> 12)) {
            fail("AXI %s burst crosses a 4 KiB boundary: 0x%08llx..0x%08llx (%u beats x %u "
                 "bytes)", ch, (unsigned long long)addr,
                 (unsigned long long)(addr + nbytes - 1), len + 1, size);
            return false;
        }
        if (addr + nbytes > mem.size()) {
            fail("AXI %s burst outside the DRAM image: 0x%08llx..0x%08llx, image is 0x%llx "
                 "bytes", ch, (unsigned long long)addr,
                 (unsigned long long)(addr + nbytes - 1), (unsigned long long)mem.size());
            return false;
        }
        return true;
    }

    void dump(uint64_t t) {
#if VH_TRACE_KIND
        if (tfp) tfp->dump(t);
#else
        (void)t;
#endif
    }

    // Assign an input port, noting whether its value changes.
    template <typename P, typename V>
    static inline void drive(P& port, V value, bool& changed) {
        if (port != (P)value) {
            port = (P)value;
            changed = true;
        }
    }

    // One eval; the input-combinational pass is skipped when ``same_inputs``.
    void eval_model(bool same_inputs) {
        vh_skip_ico = same_inputs;
        ico_skipped += same_inputs;
        top->eval();
        vh_skip_ico = false;
    }

    // One clock cycle: drive slave/master outputs, settle, sample handshakes, clock edge,
    // apply the handshakes.
    void tick() {
        Vvta_core& d = *top;
        bool changed = !inputs_settled;
        // --- 1. drive what the harness owns
        ar_ready = rq.size() < MAX_OUTSTANDING && pass();
        aw_ready = awq.size() < MAX_OUTSTANDING && pass();
        w_ready = !awq.empty() && pass();
        if (!r_valid && !rq.empty() && rq.front().ready_at <= cycle && pass()) {
            r_valid = true;
            const Burst& b = rq.front();
            uint64_t a = b.addr + (uint64_t)b.done * b.size;
            uint32_t lane = (uint32_t)(a % VH_BUS_BYTES);
            uint8_t beat[VH_BUS_BYTES] = {};
            std::memcpy(beat + lane, &mem[a], b.size);
            if (std::memcmp(bytes_of(d.m_axi_rdata), beat, VH_BUS_BYTES) != 0) {
                std::memcpy(bytes_of(d.m_axi_rdata), beat, VH_BUS_BYTES);
                changed = true;
            }
            drive(d.m_axi_rlast, b.done + 1 == b.beats, changed);
            drive(d.m_axi_rresp, 0, changed);
        }
        if (!b_valid && !bq.empty() && bq.front() <= cycle && pass()) b_valid = true;
        drive(d.m_axi_arready, ar_ready, changed);
        drive(d.m_axi_rvalid, r_valid, changed);
        drive(d.m_axi_awready, aw_ready, changed);
        drive(d.m_axi_wready, w_ready, changed);
        drive(d.m_axi_bvalid, b_valid, changed);
        drive(d.m_axi_bresp, 0, changed);
        drive(d.s_axi_awvalid, l_aw, changed);
        drive(d.s_axi_awaddr, l_addr, changed);
        drive(d.s_axi_wvalid, l_w, changed);
        drive(d.s_axi_wdata, l_wdata, changed);
        drive(d.s_axi_wstrb, 0xF, changed);
        drive(d.s_axi_bready, l_b, changed);
        drive(d.s_axi_arvalid, l_ar, changed);
        drive(d.s_axi_araddr, l_addr, changed);
        drive(d.s_axi_rready, l_r, changed);
        d.clk = 0;
        eval_model(!changed);
        inputs_settled = true;
        dump(2 * cycle);

        // --- 2. sample handshakes (values before the edge)
        bool arvalid = d.m_axi_arvalid, awvalid = d.m_axi_awvalid, wvalid = d.m_axi_wvalid;
        bool ar_fire = arvalid && ar_ready;
        bool r_fire = r_valid && d.m_axi_rready;
        bool aw_fire = awvalid && aw_ready;
        bool w_fire = wvalid && w_ready;
        bool b_fire = b_valid && d.m_axi_bready;
        if (prev_arvalid && !prev_ar_fire && !arvalid)
            fail("AXI protocol: ARVALID dropped before ARREADY");
        if (prev_awvalid && !prev_aw_fire && !awvalid)
            fail("AXI protocol: AWVALID dropped before AWREADY");
        if (prev_wvalid && !prev_w_fire && !wvalid)
            fail("AXI protocol: WVALID dropped before WREADY");
        prev_arvalid = arvalid;
        prev_awvalid = awvalid;
        prev_wvalid = wvalid;
        prev_ar_fire = ar_fire;
        prev_aw_fire = aw_fire;
        prev_w_fire = w_fire;
        uint64_t araddr = d.m_axi_araddr, awaddr = d.m_axi_awaddr;
        uint32_t arlen = d.m_axi_arlen, arsize = d.m_axi_arsize, arburst = d.m_axi_arburst;
        uint32_t awlen = d.m_axi_awlen, awsize = d.m_axi_awsize, awburst = d.m_axi_awburst;
        bool wlast = d.m_axi_wlast;
        uint64_t wstrb = (uint64_t)d.m_axi_wstrb;
        uint8_t wdata[VH_BUS_BYTES];
        if (w_fire) std::memcpy(wdata, bytes_of(d.m_axi_wdata), VH_BUS_BYTES);
        bool l_aw_fire = l_aw && d.s_axi_awready;
        bool l_w_fire = l_w && d.s_axi_wready;
        bool l_b_fire = l_b && d.s_axi_bvalid;
        bool l_ar_fire = l_ar && d.s_axi_arready;
        bool l_r_fire = l_r && d.s_axi_rvalid;
        if (l_r_fire) l_rdata = d.s_axi_rdata;

        // --- 3. clock edge
        d.clk = 1;
        eval_model(true);  // only clk changed since the eval above
        dump(2 * cycle + 1);
        ++cycle;

        // --- 4. apply handshakes
        if (ar_fire && check_burst("read", araddr, arlen, arsize, arburst)) {
            rq.push_back({araddr, arlen + 1, 1u << arsize, cycle + latency(), 0});
            ++st_rd_bursts;
        }
        if (r_fire) {
            r_valid = false;
            ++st_rd_beats;
            Burst& b = rq.front();
            if (++b.done == b.beats) rq.pop_front();
        }
        if (aw_fire && check_burst("write", awaddr, awlen, awsize, awburst)) {
            awq.push_back({awaddr, awlen + 1, 1u << awsize, 0, 0});
            ++st_wr_bursts;
        }
        if (w_fire && !awq.empty()) {
            Burst& b = awq.front();
            uint64_t a = b.addr + (uint64_t)b.done * b.size;
            uint32_t lane = (uint32_t)(a % VH_BUS_BYTES);
            for (uint32_t i = 0; i < b.size; ++i)
                if ((wstrb >> (lane + i)) & 1) mem[a + i] = wdata[lane + i];
            ++st_wr_beats;
            bool last = ++b.done == b.beats;
            if (wlast != last) {
                fail("AXI write burst at 0x%08llx (%u beats): WLAST %s on beat %u",
                     (unsigned long long)b.addr, b.beats,
                     wlast ? "asserted early" : "missing", b.done - 1);
            }
            if (last) {
                awq.pop_front();
                bq.push_back(cycle + latency());
            }
        }
        if (b_fire) {
            b_valid = false;
            bq.pop_front();
        }
        if (l_aw_fire) l_aw = false;
        if (l_w_fire) l_w = false;
        if (l_b_fire) l_b = false;
        if (l_ar_fire) l_ar = false;
        if (l_r_fire) l_r = false;
        if (!failed && ctx->gotFinish()) fail("the model executed $finish");
    }

    int step(uint64_t n) {
        for (uint64_t i = 0; i < n && !failed; ++i) tick();
        return failed ? E_BUS : E_OK;
    }

    void reset(uint32_t cycles) {
        clear_bus();
        failed = false;
        err.clear();
        top->rst = 1;
        inputs_settled = false;
        for (uint32_t i = 0; i < cycles; ++i) tick();
        top->rst = 0;
        inputs_settled = false;
        clear_bus();
        failed = false;
        err.clear();
    }

    int reg_write(uint32_t addr, uint32_t data) {
        if (failed) return E_BUS;
        l_addr = addr;
        l_wdata = data;
        l_aw = l_w = l_b = true;
        uint64_t t0 = cycle;
        while ((l_aw || l_w || l_b) && !failed) {
            if (cycle - t0 >= LITE_TIMEOUT) {
                fail("AXI4-Lite write of register 0x%02x not completed within %llu cycles "
                     "(%s pending)", addr, (unsigned long long)LITE_TIMEOUT,
                     l_aw ? "AWREADY" : l_w ? "WREADY" : "BVALID");
                l_aw = l_w = l_b = false;
                break;
            }
            tick();
        }
        return failed ? E_BUS : E_OK;
    }

    int reg_read(uint32_t addr, uint32_t* out) {
        if (failed) return E_BUS;
        l_addr = addr;
        l_ar = l_r = true;
        uint64_t t0 = cycle;
        while ((l_ar || l_r) && !failed) {
            if (cycle - t0 >= LITE_TIMEOUT) {
                fail("AXI4-Lite read of register 0x%02x not completed within %llu cycles "
                     "(%s pending)", addr, (unsigned long long)LITE_TIMEOUT,
                     l_ar ? "ARREADY" : "RVALID");
                l_ar = l_r = false;
                break;
            }
            tick();
        }
        if (failed) return E_BUS;
        *out = l_rdata;
        return E_OK;
    }

    int run_until_done(uint64_t max_cycles, uint64_t poll) {
        if (poll == 0) poll = 1;
        uint64_t t0 = cycle;
        for (;;) {
            if (step(poll) != E_OK) return E_BUS;
            uint32_t status = 0;
            if (reg_read(REG_STATUS, &status) != E_OK) return E_BUS;
            if (status & STATUS_DONE) return E_OK;
            if (cycle - t0 >= max_cycles) {
                fail("watchdog: run not done after %llu cycles (dbg_state=0x%08x)",
                     (unsigned long long)(cycle - t0), (unsigned)top->dbg_state);
                return E_WATCHDOG;
            }
        }
    }
};

}  // namespace

extern "C" {

/// Create a harness with a zero-filled DRAM image of ``mem_size`` bytes; NULL on failure.
void* vh_create(uint64_t mem_size) {
    try {
        return new Harness(mem_size);
    } catch (...) {
        return nullptr;
    }
}

void vh_destroy(void* h) { delete static_cast<Harness*>(h); }

/// AXI master data width in bytes this library was built for.
int vh_bus_bytes() { return VH_BUS_BYTES; }

/// Waveform format this library writes: 0 none, 1 VCD (--trace), 2 FST (--trace-fst).
int vh_has_trace() { return VH_TRACE_KIND; }

/// Hold rst high for ``cycles`` cycles, then release it; clears bus state and errors.
void vh_reset(void* h, uint32_t cycles) { static_cast<Harness*>(h)->reset(cycles); }

uint8_t* vh_mem_ptr(void* h) { return static_cast<Harness*>(h)->mem.data(); }
uint64_t vh_mem_size(void* h) { return static_cast<Harness*>(h)->mem.size(); }

/// Resize the DRAM image (new bytes are zero).  Invalidates earlier vh_mem_ptr results.
int vh_mem_resize(void* h, uint64_t size) {
    try {
        static_cast<Harness*>(h)->mem.resize(size, 0);
        return E_OK;
    } catch (...) {
        return E_USAGE;
    }
}

/// Random bus timing: first-beat latency uniform in [lat_min, lat_max] cycles; every
/// slave-driven ready/valid withheld with probability ``backpressure`` per cycle.
void vh_set_bus(void* h, uint32_t lat_min, uint32_t lat_max, double backpressure,
                uint64_t seed) {
    Harness* x = static_cast<Harness*>(h);
    x->lat_min = lat_min;
    x->lat_max = lat_max < lat_min ? lat_min : lat_max;
    if (backpressure <= 0) x->bp_threshold = 0;
    else if (backpressure >= 0.99) x->bp_threshold = (uint64_t)(0.99 * 18446744073709551615.0);
    else x->bp_threshold = (uint64_t)(backpressure * 18446744073709551615.0);
    x->rng = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (x->rng == 0) x->rng = 1;
}

int vh_step(void* h, uint64_t n) { return static_cast<Harness*>(h)->step(n); }

int vh_reg_write(void* h, uint32_t addr, uint32_t data) {
    return static_cast<Harness*>(h)->reg_write(addr, data);
}

int vh_reg_read(void* h, uint32_t addr, uint32_t* out) {
    return static_cast<Harness*>(h)->reg_read(addr, out);
}

/// Run until STATUS.DONE (polled every ``poll`` cycles) or ``max_cycles`` have passed.
int vh_run_until_done(void* h, uint64_t max_cycles, uint64_t poll) {
    return static_cast<Harness*>(h)->run_until_done(max_cycles, poll);
}

const char* vh_last_error(void* h) { return static_cast<Harness*>(h)->err.c_str(); }

/// Clear a recorded error (bus state is kept; use vh_reset for a clean restart).
void vh_clear_error(void* h) {
    Harness* x = static_cast<Harness*>(h);
    x->failed = false;
    x->err.clear();
}

uint64_t vh_cycle(void* h) { return static_cast<Harness*>(h)->cycle; }
uint32_t vh_dbg_state(void* h) { return static_cast<Harness*>(h)->top->dbg_state; }
int vh_irq(void* h) { return static_cast<Harness*>(h)->top->irq ? 1 : 0; }

/// Harness statistics: 0 read bursts, 1 write bursts, 2 read beats, 3 write beats, 4 evals
/// whose input-combinational pass was skipped (see vh_ico_patched).
uint64_t vh_stat(void* h, int which) {
    Harness* x = static_cast<Harness*>(h);
    switch (which) {
        case 0: return x->st_rd_bursts;
        case 1: return x->st_wr_bursts;
        case 2: return x->st_rd_beats;
        case 3: return x->st_wr_beats;
        case 4: return x->ico_skipped;
        default: return 0;
    }
}

/// Start writing a waveform (VCD or FST, as built) to ``path`` (trace builds only); -3
/// otherwise.
int vh_trace_open(void* h, const char* path) {
#if VH_TRACE_KIND
    Harness* x = static_cast<Harness*>(h);
    if (x->tfp) x->tfp->close();
    x->tfp = std::make_unique<VhTraceFile>();
    x->top->trace(x->tfp.get(), 99);
    x->tfp->open(path);
    if (!x->tfp->isOpen()) {
        x->tfp.reset();
        x->fail("cannot open waveform file %s", path);
        return E_USAGE;
    }
    return E_OK;
#else
    (void)h;
    (void)path;
    return E_USAGE;
#endif
}

void vh_trace_close(void* h) {
#if VH_TRACE_KIND
    Harness* x = static_cast<Harness*>(h);
    if (x->tfp) {
        x->tfp->close();
        x->tfp.reset();
    }
#else
    (void)h;
#endif
}

}  // extern "C"
