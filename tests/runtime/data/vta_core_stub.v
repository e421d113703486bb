// Hand-written stand-in for the generated `vta_core` (same ports as the real core), used
// to test the Verilator harness, the DRAM model and the register path before (and
// independently of) the Amaranth core.
//
// Behaviour on CTRL.START:
//   * INSN_COUNT[30:0] == 0: hang forever (fetch state 6), for the watchdog test;
//   * otherwise read the instruction region (INSN_COUNT x 16 bytes at INSN_ADDR) over the
//     AXI4 master in INCR bursts of at most MAX_BURST beats, deliberately *without*
//     splitting at 4 KiB boundaries, then write the bitwise complement of those bytes right
//     after the region (at INSN_ADDR + INSN_COUNT x 16), again in bursts of at most
//     MAX_BURST beats; the very first write beat carries WSTRB = 0x55..55 (every other
//     byte), all later beats full strobes;
//   * INSN_COUNT[31] set: the write bursts never assert WLAST (fault injection).
// The region holds at most 64 bus beats.  STATUS.DONE drops at START and rises after the
// last write response; CYCLES counts the busy cycles; DMA_RD/WR_BYTES count bytes.
module vta_core #(
    parameter integer BUS_WIDTH = 64,
    parameter [31:0] FINGERPRINT = 32'h0,
    parameter integer MAX_BURST = 16
) (
    input  wire                    clk,
    input  wire                    rst,
    input  wire [7:0]              s_axi_awaddr,
    input  wire                    s_axi_awvalid,
    output wire                    s_axi_awready,
    input  wire [31:0]             s_axi_wdata,
    input  wire [3:0]              s_axi_wstrb,
    input  wire                    s_axi_wvalid,
    output wire                    s_axi_wready,
    output wire [1:0]              s_axi_bresp,
    output reg                     s_axi_bvalid,
    input  wire                    s_axi_bready,
    input  wire [7:0]              s_axi_araddr,
    input  wire                    s_axi_arvalid,
    output wire                    s_axi_arready,
    output reg  [31:0]             s_axi_rdata,
    output wire [1:0]              s_axi_rresp,
    output reg                     s_axi_rvalid,
    input  wire                    s_axi_rready,
    output reg  [31:0]             m_axi_araddr,
    output reg  [7:0]              m_axi_arlen,
    output wire [2:0]              m_axi_arsize,
    output wire [1:0]              m_axi_arburst,
    output wire                    m_axi_arvalid,
    input  wire                    m_axi_arready,
    input  wire [BUS_WIDTH-1:0]    m_axi_rdata,
    input  wire [1:0]              m_axi_rresp,
    input  wire                    m_axi_rlast,
    input  wire                    m_axi_rvalid,
    output wire                    m_axi_rready,
    output reg  [31:0]             m_axi_awaddr,
    output reg  [7:0]              m_axi_awlen,
    output wire [2:0]              m_axi_awsize,
    output wire [1:0]              m_axi_awburst,
    output wire                    m_axi_awvalid,
    input  wire                    m_axi_awready,
    output wire [BUS_WIDTH-1:0]    m_axi_wdata,
    output wire [BUS_WIDTH/8-1:0]  m_axi_wstrb,
    output wire                    m_axi_wlast,
    output wire                    m_axi_wvalid,
    input  wire                    m_axi_wready,
    input  wire [1:0]              m_axi_bresp,
    input  wire                    m_axi_bvalid,
    output wire                    m_axi_bready,
    output wire                    irq,
    output wire [31:0]             dbg_state
);
    localparam integer BUS_BYTES = BUS_WIDTH / 8;
    localparam [2:0] SIZE = $clog2(BUS_BYTES);
    localparam [3:0] S_IDLE = 4'd0, S_RD_ADDR = 4'd1, S_RD_DATA = 4'd2, S_WR_ADDR = 4'd3,
                     S_WR_DATA = 4'd4, S_WR_RESP = 4'd5, S_HANG = 4'd6;

    // ---------------------------------------------------------------- registers
    reg        irq_en, busy, done, irq_status, no_wlast;
    reg [31:0] insn_addr_lo, insn_addr_hi, insn_count;
    reg [63:0] cycles;
    reg [31:0] rd_bytes, wr_bytes;

    // ---------------------------------------------------------------- DMA state
    reg [3:0]  state;
    reg [31:0] addr;          // next burst address
    reg [15:0] remaining;     // beats left in the current direction
    reg [8:0]  burst_beats;   // beats of the current burst
    reg [8:0]  wbeat;         // beat within the current write burst
    reg [7:0]  beat_idx;      // beat within the region
    reg [BUS_WIDTH-1:0] buffer [0:63];

    wire [15:0] nbeats = insn_count[11:0] * 16 / BUS_BYTES;
    wire [15:0] next_len = (remaining > MAX_BURST) ? MAX_BURST : remaining;

    // ---------------------------------------------------------------- AXI4-Lite slave
    wire wr_fire = s_axi_awvalid && s_axi_wvalid && !s_axi_bvalid;
    assign s_axi_awready = wr_fire;
    assign s_axi_wready = wr_fire;
    assign s_axi_bresp = 2'b00;
    assign s_axi_arready = !s_axi_rvalid;
    assign s_axi_rresp = 2'b00;
    wire start = wr_fire && s_axi_awaddr[7:2] == 6'h00 && s_axi_wdata[0] && !busy;

    reg [31:0] rd_val;
    always @(*) begin
        case (s_axi_araddr[7:2])
            6'h00: rd_val = {30'd0, irq_en, 1'b0};
            6'h01: rd_val = {30'd0, done, busy};
            6'h02: rd_val = {31'd0, irq_status};
            6'h03: rd_val = insn_addr_lo;
            6'h04: rd_val = insn_addr_hi;
            6'h05: rd_val = insn_count;
            6'h06: rd_val = cycles[31:0];
            6'h07: rd_val = cycles[63:32];
            6'h08: rd_val = FINGERPRINT;
            6'h09: rd_val = 32'h00010000;
            6'h13: rd_val = rd_bytes;
            6'h14: rd_val = wr_bytes;
            default: rd_val = 32'd0;
        endcase
    end

    always @(posedge clk) begin
        if (rst) begin
            s_axi_bvalid <= 1'b0;
            s_axi_rvalid <= 1'b0;
            s_axi_rdata <= 32'd0;
            irq_en <= 1'b0;
            irq_status <= 1'b0;
            insn_addr_lo <= 32'd0;
            insn_addr_hi <= 32'd0;
            insn_count <= 32'd0;
        end else begin
            if (wr_fire) begin
                s_axi_bvalid <= 1'b1;
                case (s_axi_awaddr[7:2])
                    6'h00: irq_en <= s_axi_wdata[1];
                    6'h02: if (s_axi_wdata[0]) irq_status <= 1'b0;
                    6'h03: insn_addr_lo <= s_axi_wdata;
                    6'h04: insn_addr_hi <= s_axi_wdata;
                    6'h05: insn_count <= s_axi_wdata;
                    default: ;
                endcase
            end else if (s_axi_bvalid && s_axi_bready) begin
                s_axi_bvalid <= 1'b0;
            end
            if (s_axi_arvalid && !s_axi_rvalid) begin
                s_axi_rvalid <= 1'b1;
                s_axi_rdata <= rd_val;
            end else if (s_axi_rvalid && s_axi_rready) begin
                s_axi_rvalid <= 1'b0;
            end
            if (state == S_WR_RESP && m_axi_bvalid && remaining == {7'd0, burst_beats})
                irq_status <= 1'b1;
        end
    end

    // ---------------------------------------------------------------- AXI4 master
    assign m_axi_arsize = SIZE;
    assign m_axi_awsize = SIZE;
    assign m_axi_arburst = 2'b01;
    assign m_axi_awburst = 2'b01;
    assign m_axi_arvalid = state == S_RD_ADDR;
    assign m_axi_rready = state == S_RD_DATA;
    assign m_axi_awvalid = state == S_WR_ADDR;
    assign m_axi_wvalid = state == S_WR_DATA;
    assign m_axi_wdata = ~buffer[beat_idx[5:0]];
    assign m_axi_wstrb = (beat_idx == 8'd0) ? {(BUS_BYTES/2){2'b01}} : {BUS_BYTES{1'b1}};
    assign m_axi_wlast = !no_wlast && (wbeat == burst_beats - 9'd1);
    assign m_axi_bready = state == S_WR_RESP;
    assign irq = irq_en && irq_status;
    assign dbg_state = {8'd0, beat_idx, 4'd0, 4'd0, 4'd0, state};

    always @(posedge clk) begin
        if (rst) begin
            state <= S_IDLE;
            busy <= 1'b0;
            done <= 1'b0;
            no_wlast <= 1'b0;
            cycles <= 64'd0;
            rd_bytes <= 32'd0;
            wr_bytes <= 32'd0;
            addr <= 32'd0;
            remaining <= 16'd0;
            burst_beats <= 9'd0;
            wbeat <= 9'd0;
            beat_idx <= 8'd0;
            m_axi_araddr <= 32'd0;
            m_axi_arlen <= 8'd0;
            m_axi_awaddr <= 32'd0;
            m_axi_awlen <= 8'd0;
        end else begin
            if (busy) cycles <= cycles + 64'd1;
            case (state)
                S_IDLE: if (start) begin
                    busy <= 1'b1;
                    done <= 1'b0;
                    cycles <= 64'd0;
                    rd_bytes <= 32'd0;
                    wr_bytes <= 32'd0;
                    beat_idx <= 8'd0;
                    no_wlast <= insn_count[31];
                    addr <= insn_addr_lo;
                    remaining <= nbeats;
                    m_axi_araddr <= insn_addr_lo;
                    m_axi_arlen <= ((nbeats > MAX_BURST) ? MAX_BURST : nbeats) - 1;
                    state <= (insn_count[30:0] == 31'd0) ? S_HANG : S_RD_ADDR;
                end
                S_RD_ADDR: if (m_axi_arready) begin
                    burst_beats <= next_len[8:0];
                    state <= S_RD_DATA;
                end
                S_RD_DATA: if (m_axi_rvalid) begin
                    buffer[beat_idx[5:0]] <= m_axi_rdata;
                    rd_bytes <= rd_bytes + BUS_BYTES;
                    if (m_axi_rlast) begin
                        if (remaining == {7'd0, burst_beats}) begin
                            // read done: write the complement right after the region
                            beat_idx <= 8'd0;
                            remaining <= nbeats;
                            addr <= insn_addr_lo + nbeats * BUS_BYTES;
                            m_axi_awaddr <= insn_addr_lo + nbeats * BUS_BYTES;
                            m_axi_awlen <= ((nbeats > MAX_BURST) ? MAX_BURST : nbeats) - 1;
                            state <= S_WR_ADDR;
                        end else begin
                            remaining <= remaining - {7'd0, burst_beats};
                            addr <= addr + burst_beats * BUS_BYTES;
                            m_axi_araddr <= addr + burst_beats * BUS_BYTES;
                            m_axi_arlen <= (((remaining - burst_beats) > MAX_BURST)
                                            ? MAX_BURST : (remaining - burst_beats)) - 1;
                            beat_idx <= beat_idx + 8'd1;
                            state <= S_RD_ADDR;
                        end
                    end else begin
                        beat_idx <= beat_idx + 8'd1;
                    end
                end
                S_WR_ADDR: if (m_axi_awready) begin
                    burst_beats <= next_len[8:0];
                    wbeat <= 9'd0;
                    state <= S_WR_DATA;
                end
                S_WR_DATA: if (m_axi_wready) begin
                    wr_bytes <= wr_bytes + BUS_BYTES;
                    beat_idx <= beat_idx + 8'd1;
                    wbeat <= wbeat + 9'd1;
                    if (wbeat == burst_beats - 9'd1) state <= S_WR_RESP;
                end
                S_WR_RESP: if (m_axi_bvalid) begin
                    if (remaining == {7'd0, burst_beats}) begin
                        busy <= 1'b0;
                        done <= 1'b1;
                        state <= S_IDLE;
                    end else begin
                        remaining <= remaining - {7'd0, burst_beats};
                        addr <= addr + burst_beats * BUS_BYTES;
                        m_axi_awaddr <= addr + burst_beats * BUS_BYTES;
                        m_axi_awlen <= (((remaining - burst_beats) > MAX_BURST)
                                        ? MAX_BURST : (remaining - burst_beats)) - 1;
                        state <= S_WR_ADDR;
                    end
                end
                S_HANG: ;
                default: state <= S_IDLE;
            endcase
        end
    end
endmodule
