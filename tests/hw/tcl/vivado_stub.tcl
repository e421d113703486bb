# Stand-ins for the Vivado commands that vtaforge's generated build.tcl uses, so that the
# script can run under a plain `tclsh` (tests/hw/test_flow_tcl.py).
#
# Written for vtaforge from the Vivado command reference (UG835) and from the facts in
# ../shared/reference/board-notes.md; the PS port, pin and address-segment names follow
# PYNQ's board designs (processing_system7: S_AXI_HP0/HP0_DDR_LOWOCM; zynq_ultra_ps_e:
# interface S_AXI_HP0_FPD, segments SAXIGP2/HP0_DDR_LOW ...).  Offsets and ranges of the
# PS's non-DDR segments are representative, not authoritative.
#
# What the stub checks (a Vivado error becomes a TCL error, so the script stops):
#   - every option of every command is one the command takes (no typos, no missing values);
#   - parts, IP names (VLNVs from get_ipdefs), the module reference (a `module` in an added
#     Verilog file), CONFIG.* property names and their values per IP;
#   - pins and interface pins exist on their cell *as configured* (S_AXI_HP0 exists only
#     when PCW_USE_S_AXI_HP0 is 1, ...); interface nets join one master and one slave; a
#     net has exactly one driver; an address segment is assigned only into an address space
#     that reaches it through the interface nets (SmartConnects pass through);
#   - validate_bd_design: every enabled PS port clock, SmartConnect/core clock and reset is
#     driven; the core's interfaces are connected; reachable, unassigned, unexcluded
#     segments are reported as a CRITICAL WARNING (as Vivado does) and recorded;
#   - runs in order (synthesis before implementation); files exist where the flow reads them.
#
# What it does: records every fact the tests assert on into the file named by
# $env(VTA_STUB_RECORD) (default: stub_record.tsv in the current directory), one event a
# line, fields separated by tabs:
#   project NAME DIR PART | board_part BP | cell NAME VLNV | prop CELL KEY VALUE |
#   iface_param IFACE KEY VALUE | intf A B | net DRIVER LOAD... | automation CELL RULE CFG |
#   assign SPACE SEG OFFSET RANGE | exclude SPACE SEG | unmapped SPACE SEG |
#   validate ok | run NAME | file ROLE PATH
# and models the PS clock (the PL clock is the PLL over two 6-bit divisors, nearest to the
# request, like Vivado's PS configuration), the routed clock, timing and outputs.
#
# Knobs (environment): VTA_STUB_RECORD; VTA_STUB_PLL_MHZ (PLL behind the PL clock; default
# 1000 on Zynq-7000, 1499.985 on ZynqMP); VTA_STUB_WNS (setup slack in ns, default 0.412);
# VTA_STUB_NO_BIT=1 (implementation writes no bitstream); VTA_STUB_HWH=gen|srcs (where the
# .hwh lands: Vivado >= 2020.2 or older; default gen).

namespace eval ::stub {
    variable here [file dirname [file normalize [info script]]]
    variable record_file [expr {[info exists ::env(VTA_STUB_RECORD)] ? $::env(VTA_STUB_RECORD)
                                : [file join [pwd] stub_record.tsv]}]
    variable project {}          ;# dict: name dir part board_part
    variable files {}            ;# source files added
    variable bd {}               ;# block design name
    variable cells [dict create] ;# name -> vlnv (or module:REF)
    variable props [dict create] ;# cell -> dict key -> value
    variable intf_nets {}        ;# list of {a b}
    variable nets {}             ;# list of pin lists (driver first)
    variable assigned [dict create]  ;# space -> dict seg -> {offset range}
    variable excluded [dict create]  ;# space -> list of segs
    variable runs [dict create]      ;# run -> status
    variable iface_params [dict create]
}

# ------------------------------------------------------------------ helpers
proc ::stub::rec {kind args} {
    variable record_file
    set f [open $record_file a]
    puts $f [join [concat [list $kind] $args] "\t"]
    close $f
}

proc ::stub::fail {msg} {
    return -code error "stub: $msg"
}

# Parse ARGV of COMMAND against SPEC (a dict: -flag -> 1 if it takes a value, 0 if not).
# Returns {options positional}; an unknown option or a missing value is an error.
proc ::stub::parse {command spec argv} {
    set opts [dict create]
    set pos {}
    for {set i 0} {$i < [llength $argv]} {incr i} {
        set a [lindex $argv $i]
        if {[string match -* $a] && ![string is double -strict $a]} {
            if {![dict exists $spec $a]} {
                fail "$command: unknown option '$a' (allowed: [join [dict keys $spec] {, }])"
            }
            if {[dict get $spec $a]} {
                incr i
                if {$i >= [llength $argv]} { fail "$command: option $a needs a value" }
                dict set opts $a [lindex $argv $i]
            } else {
                dict set opts $a 1
            }
        } else {
            lappend pos $a
        }
    }
    return [list $opts $pos]
}

# "4K" / "512M" / "2G" / 0x1000 / 4096 -> integer bytes
proc ::stub::bytes {v} {
    if {[regexp {^([0-9]+)([KMGT])$} $v -> n u]} {
        return [expr {$n << [dict get {K 10 M 20 G 30 T 40} $u]}]
    }
    if {[string is wideinteger -strict $v] || [regexp {^0[xX][0-9a-fA-F]+$} $v]} {
        return [expr {$v + 0}]
    }
    fail "not a size or address: '$v'"
}

proc ::stub::hex {v} { return [format 0x%08X $v] }

proc ::stub::family {} {
    variable project
    set part [dict get $project part]
    if {[string match xc7z* $part]} { return zynq7 }
    return zynqmp
}

proc ::stub::prop {cell key {default {}}} {
    variable props
    if {[dict exists $props $cell $key]} { return [dict get $props $cell $key] }
    return $default
}

proc ::stub::ip_of {cell} {
    variable cells
    if {![dict exists $cells $cell]} { fail "no cell '$cell' in the block design" }
    set v [dict get $cells $cell]
    if {[string match module:* $v]} { return module }
    return [lindex [split $v :] 2]
}

# ------------------------------------------------------------------ IP models
# Known IP definitions (what get_ipdefs finds).
namespace eval ::stub {
    variable ipdefs {
        xilinx.com:ip:processing_system7:5.5
        xilinx.com:ip:zynq_ultra_ps_e:3.3
        xilinx.com:ip:zynq_ultra_ps_e:3.5
        xilinx.com:ip:proc_sys_reset:5.0
        xilinx.com:ip:smartconnect:1.0
        xilinx.com:ip:clk_wiz:6.0
    }
    # Settable CONFIG.* keys per IP and a value check (a regexp).
    variable config_keys {
        processing_system7 {
            PCW_USE_S_AXI_HP0 {^[01]$} PCW_S_AXI_HP0_DATA_WIDTH {^(32|64)$}
            PCW_USE_S_AXI_ACP {^[01]$} PCW_USE_DEFAULT_ACP_USER_VAL {^[01]$}
            PCW_USE_M_AXI_GP0 {^[01]$} PCW_EN_CLK0_PORT {^[01]$}
            PCW_FPGA0_PERIPHERAL_FREQMHZ {^[0-9]+(\.[0-9]+)?$}
            PCW_FCLK0_PERIPHERAL_CLKSRC {^(IO PLL|ARM PLL|DDR PLL)$}
            PCW_USE_FABRIC_INTERRUPT {^[01]$} PCW_IRQ_F2P_INTR {^[01]$}
            PCW_USE_HIGH_OCM {^[01]$}
        }
        zynq_ultra_ps_e {
            PSU__USE__S_AXI_GP0 {^[01]$} PSU__USE__S_AXI_GP2 {^[01]$}
            PSU__SAXIGP0__DATA_WIDTH {^(32|64|128)$} PSU__SAXIGP2__DATA_WIDTH {^(32|64|128)$}
            PSU__USE__M_AXI_GP0 {^[01]$} PSU__USE__M_AXI_GP1 {^[01]$}
            PSU__USE__M_AXI_GP2 {^[01]$}
            PSU__FPGA_PL0_ENABLE {^[01]$}
            PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ {^[0-9]+(\.[0-9]+)?$}
            PSU__CRL_APB__PL0_REF_CTRL__SRCSEL {^(IOPLL|RPLL|DPLL)$}
            PSU__USE__IRQ0 {^[01]$} PSU__USE__FABRIC__RST {^[01]$}
        }
        smartconnect { NUM_SI {^[1-9]$} NUM_MI {^[1-9]$} }
        proc_sys_reset { }
        clk_wiz { }
        module { }
    }
    # Defaults of the keys the pin models read.
    variable config_defaults {
        processing_system7 {
            PCW_USE_M_AXI_GP0 1 PCW_EN_CLK0_PORT 1 PCW_USE_S_AXI_HP0 0 PCW_USE_S_AXI_ACP 0
            PCW_USE_FABRIC_INTERRUPT 0 PCW_IRQ_F2P_INTR 0 PCW_FPGA0_PERIPHERAL_FREQMHZ 50
            PCW_FCLK0_PERIPHERAL_CLKSRC {IO PLL} PCW_S_AXI_HP0_DATA_WIDTH 64
        }
        zynq_ultra_ps_e {
            PSU__USE__M_AXI_GP0 1 PSU__USE__M_AXI_GP1 1 PSU__USE__M_AXI_GP2 1
            PSU__USE__S_AXI_GP0 0 PSU__USE__S_AXI_GP2 0 PSU__FPGA_PL0_ENABLE 1
            PSU__USE__FABRIC__RST 1 PSU__USE__IRQ0 0
            PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ 100 PSU__CRL_APB__PL0_REF_CTRL__SRCSEL IOPLL
            PSU__SAXIGP0__DATA_WIDTH 128 PSU__SAXIGP2__DATA_WIDTH 128
        }
        smartconnect { NUM_SI 1 NUM_MI 2 }
    }
}

proc ::stub::cfg {cell key} {
    variable config_defaults
    set ip [ip_of $cell]
    set d {}
    if {[dict exists $config_defaults $ip $key]} { set d [dict get $config_defaults $ip $key] }
    return [prop $cell CONFIG.$key $d]
}

# Interface pins of CELL as configured: dict name -> mode (M or S).
proc ::stub::intf_pins {cell} {
    set ip [ip_of $cell]
    set p [dict create]
    switch $ip {
        processing_system7 {
            dict set p DDR X
            dict set p FIXED_IO X
            if {[cfg $cell PCW_USE_M_AXI_GP0]} { dict set p M_AXI_GP0 M }
            if {[cfg $cell PCW_USE_S_AXI_HP0]} { dict set p S_AXI_HP0 S }
            if {[cfg $cell PCW_USE_S_AXI_ACP]} { dict set p S_AXI_ACP S }
        }
        zynq_ultra_ps_e {
            if {[cfg $cell PSU__USE__M_AXI_GP0]} { dict set p M_AXI_HPM0_FPD M }
            if {[cfg $cell PSU__USE__M_AXI_GP1]} { dict set p M_AXI_HPM1_FPD M }
            if {[cfg $cell PSU__USE__M_AXI_GP2]} { dict set p M_AXI_HPM0_LPD M }
            if {[cfg $cell PSU__USE__S_AXI_GP0]} { dict set p S_AXI_HPC0_FPD S }
            if {[cfg $cell PSU__USE__S_AXI_GP2]} { dict set p S_AXI_HP0_FPD S }
        }
        smartconnect {
            for {set i 0} {$i < [cfg $cell NUM_SI]} {incr i} { dict set p [format S%02d_AXI $i] S }
            for {set i 0} {$i < [cfg $cell NUM_MI]} {incr i} { dict set p [format M%02d_AXI $i] M }
        }
        module { dict set p s_axi S; dict set p m_axi M }
    }
    return $p
}

# Plain pins of CELL as configured: dict name -> direction (O = drives, I = input).
proc ::stub::pins {cell} {
    set ip [ip_of $cell]
    set p [dict create]
    switch $ip {
        processing_system7 {
            if {[cfg $cell PCW_EN_CLK0_PORT]} { dict set p FCLK_CLK0 O }
            dict set p FCLK_RESET0_N O
            if {[cfg $cell PCW_USE_M_AXI_GP0]} { dict set p M_AXI_GP0_ACLK I }
            if {[cfg $cell PCW_USE_S_AXI_HP0]} { dict set p S_AXI_HP0_ACLK I }
            if {[cfg $cell PCW_USE_S_AXI_ACP]} { dict set p S_AXI_ACP_ACLK I }
            if {[cfg $cell PCW_USE_FABRIC_INTERRUPT] && [cfg $cell PCW_IRQ_F2P_INTR]} {
                dict set p IRQ_F2P I
            }
        }
        zynq_ultra_ps_e {
            if {[cfg $cell PSU__FPGA_PL0_ENABLE]} { dict set p pl_clk0 O }
            if {[cfg $cell PSU__USE__FABRIC__RST]} { dict set p pl_resetn0 O }
            if {[cfg $cell PSU__USE__M_AXI_GP0]} { dict set p maxihpm0_fpd_aclk I }
            if {[cfg $cell PSU__USE__M_AXI_GP1]} { dict set p maxihpm1_fpd_aclk I }
            if {[cfg $cell PSU__USE__M_AXI_GP2]} { dict set p maxihpm0_lpd_aclk I }
            if {[cfg $cell PSU__USE__S_AXI_GP0]} { dict set p saxihpc0_fpd_aclk I }
            if {[cfg $cell PSU__USE__S_AXI_GP2]} { dict set p saxihp0_fpd_aclk I }
            if {[cfg $cell PSU__USE__IRQ0]} { dict set p pl_ps_irq0 I }
        }
        proc_sys_reset {
            foreach n {slowest_sync_clk ext_reset_in aux_reset_in mb_debug_sys_rst dcm_locked} {
                dict set p $n I
            }
            foreach n {mb_reset bus_struct_reset peripheral_reset interconnect_aresetn
                       peripheral_aresetn} {
                dict set p $n O
            }
        }
        smartconnect { dict set p aclk I; dict set p aresetn I }
        module { dict set p clk I; dict set p rst I; dict set p irq O }
    }
    return $p
}

# The clock pin that each PS AXI port is timed by.
proc ::stub::port_clock {cell port} {
    return [dict get {
        M_AXI_GP0 M_AXI_GP0_ACLK S_AXI_HP0 S_AXI_HP0_ACLK S_AXI_ACP S_AXI_ACP_ACLK
        M_AXI_HPM0_FPD maxihpm0_fpd_aclk M_AXI_HPM1_FPD maxihpm1_fpd_aclk
        M_AXI_HPM0_LPD maxihpm0_lpd_aclk S_AXI_HPC0_FPD saxihpc0_fpd_aclk
        S_AXI_HP0_FPD saxihp0_fpd_aclk
    } $port]
}

# Address spaces: space -> {master interface pins, aperture base, aperture size}.
proc ::stub::spaces {} {
    variable cells
    set s [dict create]
    dict for {cell v} $cells {
        switch [ip_of $cell] {
            processing_system7 {
                dict set s $cell/Data [list [list $cell/M_AXI_GP0] 0x40000000 0x40000000]
            }
            zynq_ultra_ps_e {
                dict set s $cell/Data [list [list $cell/M_AXI_HPM0_FPD $cell/M_AXI_HPM1_FPD \
                                           $cell/M_AXI_HPM0_LPD] 0x80000000 0x40000000]
            }
            module { dict set s $cell/m_axi [list [list $cell/m_axi] 0 0x100000000] }
        }
    }
    return $s
}

# Slave segments: seg path -> {slave interface pin, default offset, range, fixed offset?}.
proc ::stub::slave_segs {} {
    variable cells
    set s [dict create]
    dict for {cell v} $cells {
        set ip [ip_of $cell]
        set have [intf_pins $cell]
        if {$ip eq "processing_system7"} {
            if {[dict exists $have S_AXI_HP0]} {
                dict set s $cell/S_AXI_HP0/HP0_DDR_LOWOCM [list $cell/S_AXI_HP0 0 0x20000000 1]
                dict set s $cell/S_AXI_HP0/HP0_HIGH_OCM [list $cell/S_AXI_HP0 0xFFFC0000 0x40000 1]
            }
            if {[dict exists $have S_AXI_ACP]} {
                foreach {n o r} {ACP_DDR_LOWOCM 0 0x20000000 ACP_HIGH_OCM 0xFFFC0000 0x40000
                                 ACP_IOP 0xE0000000 0x400000 ACP_M_AXI_GP0 0x40000000 0x40000000
                                 ACP_QSPI_LINEAR 0xFC000000 0x1000000} {
                    dict set s $cell/S_AXI_ACP/$n [list $cell/S_AXI_ACP $o $r 1]
                }
            }
        } elseif {$ip eq "zynq_ultra_ps_e"} {
            foreach {port box pre} {S_AXI_HP0_FPD SAXIGP2 HP0 S_AXI_HPC0_FPD SAXIGP0 HPC0} {
                if {![dict exists $have $port]} continue
                foreach {n o r} {DDR_LOW 0 0x80000000 DDR_HIGH 0x800000000 0x800000000
                                 LPS_OCM 0xFF000000 0x1000000 QSPI 0xC0000000 0x20000000
                                 PCIE_LOW 0xE0000000 0x10000000} {
                    dict set s $cell/$box/${pre}_$n [list $cell/$port $o $r 1]
                }
            }
        } elseif {$ip eq "module"} {
            dict set s $cell/s_axi/reg0 [list $cell/s_axi 0 0x1000 0]
        }
    }
    return $s
}

# Interface pins reachable downstream from interface pin PIN through the interface nets.
proc ::stub::reach {pin} {
    variable intf_nets
    set out {}
    set todo [list $pin]
    set seen [dict create]
    while {[llength $todo]} {
        set p [lindex $todo 0]
        set todo [lrange $todo 1 end]
        if {[dict exists $seen $p]} continue
        dict set seen $p 1
        lappend out $p
        foreach n $intf_nets {
            lassign $n a b
            if {$a eq $p} { lappend todo $b }
            if {$b eq $p} { lappend todo $a }
        }
        # a SmartConnect passes every slave port to every master port
        lassign [split $p /] cell port
        if {[ip_of $cell] eq "smartconnect" && [string match S*_AXI $port]} {
            dict for {q mode} [intf_pins $cell] {
                if {$mode eq "M"} { lappend todo $cell/$q }
            }
        }
    }
    return $out
}

proc ::stub::reachable {space seg} {
    set sp [dict get [spaces] $space]
    set sl [lindex [dict get [slave_segs] $seg] 0]
    foreach m [lindex $sp 0] {
        if {$sl in [reach $m]} { return 1 }
    }
    return 0
}

# ------------------------------------------------------------------ project commands
proc create_project {args} {
    lassign [::stub::parse create_project {-force 0 -part 1 -in_memory 0} $args] o pos
    if {[llength $pos] != 2} { ::stub::fail "create_project: want NAME DIR, got '$pos'" }
    if {![dict exists $o -part]} { ::stub::fail "create_project: no -part" }
    set part [dict get $o -part]
    if {![regexp {^(xc7z0[0-9]{2}(clg400|clg484|clg225)-[123]|xczu[0-9]+(eg|cg|ev)-[a-z]{4}[0-9]{3,4}-[12]-[ei])$} $part]} {
        ::stub::fail "create_project: part '$part' is not a Zynq part Vivado knows"
    }
    lassign $pos name dir
    if {[file exists [file join $dir $name.xpr]] && ![dict exists $o -force]} {
        ::stub::fail "create_project: project $name exists in $dir (use -force)"
    }
    if {[dict exists $o -force]} { file delete -force $dir }   ;# -force recreates the project
    file mkdir $dir
    close [open [file join $dir $name.xpr] w]
    set ::stub::project [dict create name $name dir [file normalize $dir] part $part board_part {}]
    ::stub::rec project $name [file normalize $dir] $part
    return $name
}

proc current_project {args} {
    if {$::stub::project eq ""} { ::stub::fail "current_project: no project" }
    return [dict get $::stub::project name]
}

proc current_fileset {args} { return sources_1 }

proc add_files {args} {
    lassign [::stub::parse add_files {-norecurse 0 -fileset 1} $args] o pos
    set added {}
    foreach f [join $pos] {
        if {![file isfile $f]} { ::stub::fail "add_files: '$f' does not exist" }
        lappend ::stub::files [file normalize $f]
        lappend added $f
        ::stub::rec file source [file normalize $f]
    }
    return $added
}

proc update_compile_order {args} {
    ::stub::parse update_compile_order {-fileset 1} $args
    return
}

proc get_files {args} {
    lassign [::stub::parse get_files {-of_objects 1} $args] o pos
    set pat [lindex $pos 0]
    if {$::stub::bd ne "" && [string match $pat $::stub::bd.bd]} { return [::stub::bd_file] }
    ::stub::fail "get_files: no file '$pat'"
}

proc ::stub::bd_file {} {
    variable project
    variable bd
    return [file join [dict get $project dir] "[dict get $project name].srcs" sources_1 bd $bd $bd.bd]
}

# set_property NAME VALUE OBJECTS  |  set_property -dict {K V ...} OBJECTS
proc set_property {args} {
    lassign [::stub::parse set_property {-dict 1 -quiet 0} $args] o pos
    if {[dict exists $o -dict]} {
        set kv [dict get $o -dict]
        set objs [lindex $pos 0]
    } else {
        if {[llength $pos] != 3} { ::stub::fail "set_property: want NAME VALUE OBJECT, got '$pos'" }
        set kv [list [lindex $pos 0] [lindex $pos 1]]
        set objs [lindex $pos 2]
    }
    if {[llength $kv] % 2} { ::stub::fail "set_property -dict: odd key/value list" }
    foreach obj $objs {
        if {[dict exists $::stub::cells $obj]} {
            set ip [::stub::ip_of $obj]
            foreach {k v} $kv {
                if {![string match CONFIG.* $k]} { ::stub::fail "set_property: $k is not a CONFIG.* property of $obj" }
                set key [string range $k 7 end]
                set allowed [dict get $::stub::config_keys $ip]
                if {![dict exists $allowed $key]} {
                    ::stub::fail "set_property: $ip ($obj) has no parameter CONFIG.$key"
                }
                if {![regexp [dict get $allowed $key] $v]} {
                    ::stub::fail "set_property: CONFIG.$key = '$v' is not a valid value"
                }
                dict set ::stub::props $obj CONFIG.$key $v
                ::stub::rec prop $obj $key $v
            }
        } elseif {$::stub::project ne "" && $obj eq [dict get $::stub::project name]} {
            foreach {k v} $kv {
                if {$k ne "board_part"} { ::stub::fail "set_property: project property $k" }
                dict set ::stub::project board_part $v
                ::stub::rec board_part $v
            }
        } elseif {$obj eq "sources_1"} {
            foreach {k v} $kv {
                if {$k ne "top"} { ::stub::fail "set_property: fileset property $k" }
                ::stub::rec top $v
            }
        } elseif {$::stub::bd ne "" && $obj eq [::stub::bd_file]} {
            foreach {k v} $kv {
                if {$k ne "synth_checkpoint_mode" || $v ni {None Singular Hierarchical}} {
                    ::stub::fail "set_property: bd file property $k = $v"
                }
            }
        } else {
            ::stub::fail "set_property: unknown object '$obj'"
        }
    }
    return
}

# ------------------------------------------------------------------ block design
proc create_bd_design {args} {
    lassign [::stub::parse create_bd_design {-dir 1} $args] o pos
    set ::stub::bd [lindex $pos 0]
    set f [::stub::bd_file]
    file mkdir [file dirname $f]
    close [open $f w]
    return $::stub::bd
}

proc get_ipdefs {args} {
    lassign [::stub::parse get_ipdefs {-all 0 -filter 1} $args] o pos
    set out {}
    foreach d $::stub::ipdefs {
        if {[string match [lindex $pos 0] $d]} { lappend out $d }
    }
    return $out
}

proc create_bd_cell {args} {
    lassign [::stub::parse create_bd_cell {-type 1 -vlnv 1 -reference 1} $args] o pos
    if {[llength $pos] != 1} { ::stub::fail "create_bd_cell: want one NAME, got '$pos'" }
    set name [lindex $pos 0]
    if {[dict exists $::stub::cells $name]} { ::stub::fail "create_bd_cell: '$name' exists" }
    set type [dict get $o -type]
    if {$type eq "ip"} {
        set v [dict get $o -vlnv]
        if {$v ni $::stub::ipdefs} { ::stub::fail "create_bd_cell: IP '$v' is not installed" }
        set ip [lindex [split $v :] 2]
        set fam [::stub::family]
        if {($ip eq "processing_system7" && $fam ne "zynq7") ||
            ($ip eq "zynq_ultra_ps_e" && $fam ne "zynqmp")} {
            ::stub::fail "create_bd_cell: $ip does not exist on part [dict get $::stub::project part]"
        }
        dict set ::stub::cells $name $v
    } elseif {$type eq "module"} {
        set ref [dict get $o -reference]
        set found 0
        foreach f $::stub::files {
            set fh [open $f]
            set text [read $fh]
            close $fh
            if {[regexp "(^|\n)\\s*module\\s+$ref\\s*\\(" $text]} {
                set found 1
                ::stub::wrapper_params $text
            }
        }
        if {!$found} { ::stub::fail "create_bd_cell: no module '$ref' in the added sources" }
        dict set ::stub::cells $name module:$ref
        set v module:$ref
    } else {
        ::stub::fail "create_bd_cell: -type '$type'"
    }
    ::stub::rec cell $name $v
    return $name
}

# Record the X_INTERFACE_PARAMETER values of the module reference's interfaces.
proc ::stub::wrapper_params {text} {
    set lines [split $text \n]
    for {set i 0} {$i < [llength $lines]} {incr i} {
        set l [lindex $lines $i]
        if {![regexp {X_INTERFACE_PARAMETER = "([^"]*)"} $l -> params]} continue
        # the interface: the X_INTERFACE_INFO on the line above names it
        set info [lindex $lines [expr {$i - 1}]]
        if {![regexp {X_INTERFACE_INFO = "\S+ (\S+) \S+"} $info -> iface]} continue
        foreach item [split $params ,] {
            set item [string trim $item]
            set k [lindex $item 0]
            set v [lrange $item 1 end]
            dict set ::stub::iface_params $iface $k $v
            ::stub::rec iface_param $iface $k $v
        }
    }
}

proc get_bd_cells {args} {
    lassign [::stub::parse get_bd_cells {-hierarchical 0 -quiet 0} $args] o pos
    foreach c $pos {
        if {![dict exists $::stub::cells $c]} { ::stub::fail "get_bd_cells: no cell '$c'" }
    }
    return $pos
}

proc apply_bd_automation {args} {
    lassign [::stub::parse apply_bd_automation {-rule 1 -config 1 -dict 1} $args] o pos
    set cell [lindex $pos 0]
    set ip [::stub::ip_of $cell]
    set rule [dict get $o -rule]
    if {$rule ne "xilinx.com:bd_rule:$ip"} { ::stub::fail "apply_bd_automation: rule $rule for $ip" }
    set c [dict get $o -config]
    foreach k [dict keys $c] {
        if {$k ni {make_external apply_board_preset Master Slave}} {
            ::stub::fail "apply_bd_automation: config key '$k'"
        }
    }
    if {[dict exists $c apply_board_preset] && [dict get $c apply_board_preset] eq "1"
        && [dict get $::stub::project board_part] eq ""} {
        ::stub::fail "apply_bd_automation: apply_board_preset 1 without a board_part"
    }
    ::stub::rec automation $cell $rule $c
    return
}

proc get_bd_intf_pins {args} {
    lassign [::stub::parse get_bd_intf_pins {-of_objects 1 -quiet 0} $args] o pos
    foreach p $pos {
        lassign [split $p /] cell name
        if {![dict exists [::stub::intf_pins $cell] $name]} {
            ::stub::fail "get_bd_intf_pins: $cell has no interface pin '$name' as configured\
                (has: [join [dict keys [::stub::intf_pins $cell]] {, }])"
        }
    }
    return $pos
}

proc get_bd_pins {args} {
    lassign [::stub::parse get_bd_pins {-of_objects 1 -quiet 0} $args] o pos
    foreach p $pos {
        lassign [split $p /] cell name
        if {![dict exists [::stub::pins $cell] $name]} {
            ::stub::fail "get_bd_pins: $cell has no pin '$name' as configured\
                (has: [join [dict keys [::stub::pins $cell]] {, }])"
        }
    }
    return $pos
}

proc connect_bd_intf_net {args} {
    lassign [::stub::parse connect_bd_intf_net {-intf_net 1 -boundary_type 1} $args] o pos
    if {[llength $pos] != 2} { ::stub::fail "connect_bd_intf_net: want two pins, got '$pos'" }
    set modes {}
    foreach p $pos {
        lassign [split $p /] cell name
        lappend modes [dict get [::stub::intf_pins $cell] $name]
        foreach n $::stub::intf_nets {
            if {$p in $n} { ::stub::fail "connect_bd_intf_net: $p is already connected" }
        }
    }
    if {[lsort $modes] ne {M S}} {
        ::stub::fail "connect_bd_intf_net: $pos are [join $modes /], need one master and one slave"
    }
    lappend ::stub::intf_nets $pos
    ::stub::rec intf {*}$pos
    return
}

proc connect_bd_net {args} {
    lassign [::stub::parse connect_bd_net {-net 1} $args] o pos
    set drivers {}
    set loads {}
    foreach p $pos {
        lassign [split $p /] cell name
        set d [dict get [::stub::pins $cell] $name]
        foreach n $::stub::nets {
            if {$p in $n} { ::stub::fail "connect_bd_net: $p is already on a net" }
        }
        if {$d eq "O"} { lappend drivers $p } else { lappend loads $p }
    }
    if {[llength $drivers] != 1} {
        ::stub::fail "connect_bd_net: a net needs exactly one driver, got [llength $drivers]: $drivers"
    }
    lappend ::stub::nets [concat $drivers $loads]
    ::stub::rec net {*}[concat $drivers $loads]
    return
}

proc ::stub::net_of {pin} {
    foreach n $::stub::nets {
        if {$pin in $n} { return $n }
    }
    return {}
}

# ------------------------------------------------------------------ addresses
proc get_bd_addr_spaces {args} {
    lassign [::stub::parse get_bd_addr_spaces {-of_objects 1 -quiet 0} $args] o pos
    set sp [::stub::spaces]
    foreach s $pos {
        if {![dict exists $sp $s]} {
            ::stub::fail "get_bd_addr_spaces: no address space '$s' (have: [join [dict keys $sp] {, }])"
        }
    }
    return $pos
}

proc get_bd_addr_segs {args} {
    lassign [::stub::parse get_bd_addr_segs {-of_objects 1 -excluded 0 -filter 1 -quiet 0} $args] o pos
    if {[dict exists $o -of_objects]} {
        set space [dict get $o -of_objects]
        set out {}
        set list [expr {[dict exists $o -excluded]
                        ? ([dict exists $::stub::excluded $space] ? [dict get $::stub::excluded $space] : {})
                        : ([dict exists $::stub::assigned $space] ? [dict keys [dict get $::stub::assigned $space]] : {})}]
        foreach seg $list { lappend out "$space/SEG_[string map {/ _} $seg]" }
        if {[dict exists $o -filter]} {
            if {![regexp {^NAME =~ (\S+)$} [dict get $o -filter] -> pat]} {
                ::stub::fail "get_bd_addr_segs: filter '[dict get $o -filter]'"
            }
            set keep {}
            foreach s $out { if {[string match $pat [lindex [split $s /] end]]} { lappend keep $s } }
            set out $keep
        }
        return $out
    }
    set segs [::stub::slave_segs]
    set out {}
    foreach pat $pos {
        set hit 0
        foreach s [dict keys $segs] {
            if {[string match $pat $s]} { lappend out $s; set hit 1 }
        }
        if {!$hit && ![string match *\\** $pat]} {
            ::stub::fail "get_bd_addr_segs: no segment '$pat' (have: [join [dict keys $segs] {, }])"
        }
    }
    return $out
}

proc ::stub::map {space seg offset range force} {
    variable assigned
    set sp [dict get [spaces] $space]
    set info [dict get [slave_segs] $seg]
    lassign $info pin doff drange fixed
    if {![reachable $space $seg]} { fail "assign_bd_address: $seg is not reachable from $space" }
    if {$offset eq ""} { set offset $doff }
    if {$range eq ""} { set range $drange }
    set offset [bytes $offset]
    set range [bytes $range]
    if {$range & ($range - 1)} { fail "assign_bd_address: range [hex $range] is not a power of two" }
    if {$offset % $range} { fail "assign_bd_address: offset [hex $offset] is not aligned to its range" }
    if {$fixed && ($offset < $doff || $offset + $range > $doff + $drange)} {
        fail "assign_bd_address: $seg lies at [hex $doff] (+[hex $drange]), not [hex $offset]"
    }
    lassign $sp masters base size
    if {$offset < $base || $offset + $range > $base + $size} {
        if {$fixed} { return "" }   ;# not addressable from this space (e.g. DDR_HIGH from 32 bits)
        fail "assign_bd_address: [hex $offset] (+[hex $range]) is outside $space ([hex $base] +[hex $size])"
    }
    if {[dict exists $assigned $space $seg] && !$force} {
        fail "assign_bd_address: $seg is already assigned in $space (use -force)"
    }
    dict set assigned $space $seg [list $offset $range]
    rec assign $space $seg [hex $offset] [hex $range]
    return "$space/SEG_[string map {/ _} $seg]"
}

proc assign_bd_address {args} {
    lassign [::stub::parse assign_bd_address {-offset 1 -range 1 -target_address_space 1
                                              -force 0 -quiet 0 -with_name 1} $args] o pos
    set off [expr {[dict exists $o -offset] ? [dict get $o -offset] : ""}]
    set rng [expr {[dict exists $o -range] ? [dict get $o -range] : ""}]
    set force [dict exists $o -force]
    set segs [join $pos]
    if {[dict exists $o -target_address_space]} {
        set space [dict get $o -target_address_space]
        if {![llength $segs]} { ::stub::fail "assign_bd_address: -target_address_space without a segment" }
        set out {}
        foreach seg $segs { lappend out [::stub::map $space $seg $off $rng $force] }
        return $out
    }
    if {[llength $segs]} { ::stub::fail "assign_bd_address: segments without -target_address_space" }
    # no arguments: map every reachable, unmapped, unexcluded segment into every space
    set out {}
    dict for {space sp} [::stub::spaces] {
        dict for {seg info} [::stub::slave_segs] {
            if {![::stub::reachable $space $seg]} continue
            if {[dict exists $::stub::assigned $space $seg]} continue
            if {[dict exists $::stub::excluded $space] && $seg in [dict get $::stub::excluded $space]} continue
            set lo [lindex $sp 1]
            set off [expr {[lindex $info 3] ? "" : [::stub::hex $lo]}]
            lappend out [::stub::map $space $seg $off "" 0]
        }
    }
    return $out
}

proc exclude_bd_addr_seg {args} {
    lassign [::stub::parse exclude_bd_addr_seg {-target_address_space 1 -offset 1 -range 1 -quiet 0} $args] o pos
    if {![dict exists $o -target_address_space]} { ::stub::fail "exclude_bd_addr_seg: no -target_address_space" }
    set space [dict get $o -target_address_space]
    foreach seg [join $pos] {
        if {![dict exists [::stub::slave_segs] $seg]} { ::stub::fail "exclude_bd_addr_seg: no segment '$seg'" }
        if {![::stub::reachable $space $seg]} { ::stub::fail "exclude_bd_addr_seg: $seg is not reachable from $space" }
        if {[dict exists $::stub::assigned $space $seg]} {
            dict unset ::stub::assigned $space $seg
        }
        dict lappend ::stub::excluded $space $seg
        ::stub::rec exclude $space $seg
    }
    return
}

proc validate_bd_design {args} {
    ::stub::parse validate_bd_design {-force 0 -quiet 0} $args
    # every enabled PS port has a driven clock; every SmartConnect/core/reset input is driven
    dict for {cell v} $::stub::cells {
        set ip [::stub::ip_of $cell]
        if {$ip in {processing_system7 zynq_ultra_ps_e}} {
            dict for {port mode} [::stub::intf_pins $cell] {
                if {$mode eq "X"} continue
                set clk [::stub::port_clock $cell $port]
                if {![llength [::stub::net_of $cell/$clk]]} {
                    ::stub::fail "validate_bd_design: \[BD 41-758\] $cell/$clk (clock of $port) is not connected"
                }
            }
        }
        set need [dict get {processing_system7 {} zynq_ultra_ps_e {} smartconnect {aclk aresetn}
                            proc_sys_reset {slowest_sync_clk ext_reset_in} module {clk rst}} $ip]
        foreach n $need {
            if {![llength [::stub::net_of $cell/$n]]} {
                ::stub::fail "validate_bd_design: $cell/$n is not connected"
            }
        }
        if {$ip in {module smartconnect}} {
            dict for {p mode} [::stub::intf_pins $cell] {
                set ok 0
                foreach n $::stub::intf_nets { if {"$cell/$p" in $n} { set ok 1 } }
                if {!$ok} { ::stub::fail "validate_bd_design: interface $cell/$p is not connected" }
            }
        }
    }
    # one clock: the core's clock, every SmartConnect and every used PS port clock on one net
    set clknet [::stub::net_of [lindex [lsearch -inline -all -glob [dict keys $::stub::cells] vta_*] 0]/clk]
    foreach n $::stub::nets {
        foreach p $n {
            if {[string match */aclk $p] || [string match *_aclk $p] || [string match *ACLK $p]} {
                if {$p ni $clknet} { ::stub::fail "validate_bd_design: $p is not on the core's clock net" }
            }
        }
    }
    # segments that a space reaches but that are neither mapped nor excluded
    dict for {space sp} [::stub::spaces] {
        dict for {seg info} [::stub::slave_segs] {
            if {![::stub::reachable $space $seg]} continue
            if {[dict exists $::stub::assigned $space $seg]} continue
            if {[dict exists $::stub::excluded $space] && $seg in [dict get $::stub::excluded $space]} continue
            puts "CRITICAL WARNING: \[BD 41-1356\] Address block <$seg> is not mapped into <$space>."
            ::stub::rec unmapped $space $seg
        }
    }
    ::stub::rec validate ok
    return
}

proc save_bd_design {args} { return }

# ------------------------------------------------------------------ outputs and runs
proc ::stub::gen_dir {} {
    variable project
    set layout [expr {[info exists ::env(VTA_STUB_HWH)] ? $::env(VTA_STUB_HWH) : "gen"}]
    set kind [expr {$layout eq "srcs" ? "srcs" : "gen"}]
    return [file join [dict get $project dir] "[dict get $project name].$kind" sources_1 bd $::stub::bd]
}

proc generate_target {args} {
    lassign [::stub::parse generate_target {-force 0 -quiet 0} $args] o pos
    lassign $pos what f
    if {$what ne "all" || $f ne [::stub::bd_file]} { ::stub::fail "generate_target: '$pos'" }
    set d [file join [::stub::gen_dir] hw_handoff]
    file mkdir $d
    set fh [open [file join $d $::stub::bd.hwh] w]
    puts $fh "<?xml version=\"1.0\"?><EDKSYSTEM><!-- stub hand-off --></EDKSYSTEM>"
    close $fh
    return
}

proc make_wrapper {args} {
    lassign [::stub::parse make_wrapper {-files 1 -top 0 -fileset 1 -inst_template 0} $args] o pos
    if {[dict get $o -files] ne [::stub::bd_file]} { ::stub::fail "make_wrapper: -files" }
    set d [file join [::stub::gen_dir] hdl]
    file mkdir $d
    set f [file join $d ${::stub::bd}_wrapper.v]
    set fh [open $f w]
    puts $fh "module ${::stub::bd}_wrapper(); endmodule"
    close $fh
    return $f
}

proc get_runs {args} {
    lassign [::stub::parse get_runs {-quiet 0} $args] o pos
    foreach r $pos { if {$r ni {synth_1 impl_1}} { ::stub::fail "get_runs: no run '$r'" } }
    return $pos
}

proc launch_runs {args} {
    lassign [::stub::parse launch_runs {-jobs 1 -to_step 1 -quiet 0} $args] o pos
    set run [lindex $pos 0]
    if {[dict exists $o -jobs] && ![string is integer -strict [dict get $o -jobs]]} {
        ::stub::fail "launch_runs: -jobs [dict get $o -jobs]"
    }
    if {$run eq "impl_1"} {
        if {![dict exists $::stub::runs synth_1]} { ::stub::fail "launch_runs impl_1 before synth_1" }
        if {[dict exists $o -to_step] && [dict get $o -to_step] ne "write_bitstream"} {
            ::stub::fail "launch_runs: -to_step [dict get $o -to_step]"
        }
        set d [file join [dict get $::stub::project dir] "[dict get $::stub::project name].runs" impl_1]
        file mkdir $d
        if {!([info exists ::env(VTA_STUB_NO_BIT)] && $::env(VTA_STUB_NO_BIT) eq "1")} {
            set fh [open [file join $d ${::stub::bd}_wrapper.bit] w]
            puts -nonewline $fh "stub bitstream"
            close $fh
        }
    } elseif {$run ne "synth_1"} {
        ::stub::fail "launch_runs: run '$run'"
    }
    dict set ::stub::runs $run launched
    ::stub::rec run $run
    return
}

proc wait_on_run {args} {
    lassign [::stub::parse wait_on_run {-timeout 1} $args] o pos
    if {![dict exists $::stub::runs [lindex $pos 0]]} { ::stub::fail "wait_on_run: [lindex $pos 0] not launched" }
    return
}

proc open_run {args} {
    lassign [::stub::parse open_run {-name 1} $args] o pos
    if {[lindex $pos 0] ne "impl_1" || ![dict exists $::stub::runs impl_1]} {
        ::stub::fail "open_run: '[lindex $pos 0]'"
    }
    return impl_1
}

# The PL clock the PS makes for a request: the PLL over two 6-bit dividers, nearest.
proc ::stub::pll_mhz {} {
    if {[info exists ::env(VTA_STUB_PLL_MHZ)]} { return $::env(VTA_STUB_PLL_MHZ) }
    return [expr {[family] eq "zynq7" ? 1000.0 : 1499.985}]
}

proc ::stub::act_mhz {} {
    set ps [lindex [lsearch -inline -all -regexp [dict keys $::stub::cells] {^ps}] 0]
    if {[family] eq "zynq7"} {
        set req [cfg $ps PCW_FPGA0_PERIPHERAL_FREQMHZ]
    } else {
        set req [cfg $ps PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ]
    }
    set pll [pll_mhz]
    set best {}
    for {set a 1} {$a < 64} {incr a} {
        for {set b 1} {$b < 64} {incr b} {
            set f [expr {$pll / ($a * $b)}]
            if {$best eq "" || abs($f - $req) < abs($best - $req)} { set best $f }
        }
    }
    return [format %.6f $best]
}

proc ::stub::clock_name {} {
    return [expr {[family] eq "zynq7" ? "clk_fpga_0" : "clk_pl_0"}]
}

proc ::stub::wns {} {
    return [expr {[info exists ::env(VTA_STUB_WNS)] ? $::env(VTA_STUB_WNS) : 0.412}]
}

proc get_pins {args} {
    lassign [::stub::parse get_pins {-hierarchical 0 -hier 0 -filter 1 -of_objects 1 -quiet 0} $args] o pos
    set pin "${::stub::bd}_i/vta_0/clk"
    if {[dict exists $o -filter]} {
        if {![regexp {^NAME =~ (\S+)$} [dict get $o -filter] -> pat]} {
            ::stub::fail "get_pins: filter '[dict get $o -filter]'"
        }
        return [expr {[string match $pat $pin] ? [list $pin] : {}}]
    }
    return $pos
}

proc get_clocks {args} {
    lassign [::stub::parse get_clocks {-of_objects 1 -quiet 0 -filter 1} $args] o pos
    if {[dict exists $o -of_objects]} {
        return [expr {[llength [dict get $o -of_objects]] ? [list [::stub::clock_name]] : {}}]
    }
    set out {}
    foreach p $pos { if {[string match $p [::stub::clock_name]]} { lappend out [::stub::clock_name] } }
    return $out
}

proc get_timing_paths {args} {
    lassign [::stub::parse get_timing_paths {-max_paths 1 -nworst 1 -setup 0 -hold 0 -delay_type 1 -quiet 0} $args] o pos
    return [expr {[dict exists $o -hold] ? "timing_path_hold" : "timing_path_setup"}]
}

proc get_property {args} {
    lassign [::stub::parse get_property {-quiet 0} $args] o pos
    lassign $pos name obj
    if {[dict exists $::stub::cells $obj]} {
        if {![string match CONFIG.* $name]} { ::stub::fail "get_property: $name of cell $obj" }
        set key [string range $name 7 end]
        if {$key in {PCW_ACT_FPGA0_PERIPHERAL_FREQMHZ PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ}} {
            set want [expr {[::stub::family] eq "zynq7" ? "PCW_ACT_FPGA0_PERIPHERAL_FREQMHZ"
                            : "PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ"}]
            if {$key ne $want} { ::stub::fail "get_property: [::stub::ip_of $obj] has no $key" }
            return [::stub::act_mhz]
        }
        if {![dict exists [dict get $::stub::config_keys [::stub::ip_of $obj]] $key]} {
            ::stub::fail "get_property: [::stub::ip_of $obj] has no parameter $name"
        }
        return [::stub::cfg $obj $key]
    }
    switch -glob -- $obj {
        synth_1 - impl_1 {
            if {$name ne "PROGRESS"} { ::stub::fail "get_property: $name of run $obj" }
            return "100%"
        }
        clk_fpga_0 - clk_pl_0 {
            if {$name ne "PERIOD"} { ::stub::fail "get_property: $name of clock $obj" }
            return [format %.3f [expr {1000.0 / [::stub::act_mhz]}]]
        }
        timing_path_setup {
            if {$name ne "SLACK"} { ::stub::fail "get_property: $name of a timing path" }
            return [::stub::wns]
        }
        timing_path_hold {
            if {$name ne "SLACK"} { ::stub::fail "get_property: $name of a timing path" }
            return 0.018
        }
        */SEG_* {
            set space [join [lrange [split $obj /] 0 1] /]
            foreach {seg or} [dict get $::stub::assigned $space] {
                if {"$space/SEG_[string map {/ _} $seg]" eq $obj} {
                    switch $name {
                        OFFSET { return [::stub::hex [lindex $or 0]] }
                        RANGE { return [lindex $or 1] }
                        NAME { return [lindex [split $obj /] end] }
                    }
                    ::stub::fail "get_property: $name of segment $obj"
                }
            }
            ::stub::fail "get_property: no segment $obj"
        }
    }
    if {$name eq "NAME"} { return [lindex [split $obj /] end] }
    ::stub::fail "get_property: $name of '$obj'"
}

# A minimal report_timing_summary text (same sections and verdict lines as Vivado's).
proc report_timing_summary {args} {
    lassign [::stub::parse report_timing_summary {-max_paths 1 -file 1 -delay_type 1 -quiet 0} $args] o pos
    if {![dict exists $::stub::runs impl_1]} { ::stub::fail "report_timing_summary: no routed design" }
    set wns [::stub::wns]
    set clk [::stub::clock_name]
    set period [format %.3f [expr {1000.0 / [::stub::act_mhz]}]]
    set verdict [expr {$wns >= 0 ? "All user specified timing constraints are met."
                                 : "Timing constraints are not met."}]
    set row [format "%11.3f  %11.3f  %21d  %19d  %11.3f  %11.3f  %21d  %19d" $wns \
                 [expr {$wns < 0 ? $wns * 40 : 0.0}] [expr {$wns < 0 ? 40 : 0}] 48211 0.018 0.0 0 48211]
    set text "Timing Summary Report (vtaforge stub)\n\n"
    append text "------------------------------------------------------------------------\n"
    append text "| Design Timing Summary\n| ---------------------\n"
    append text "------------------------------------------------------------------------\n\n"
    append text "    WNS(ns)      TNS(ns)  TNS Failing Endpoints  TNS Total Endpoints      WHS(ns)      THS(ns)  THS Failing Endpoints  THS Total Endpoints\n"
    append text "    -------      -------  ---------------------  -------------------      -------      -------  ---------------------  -------------------\n"
    append text "$row\n\n\n$verdict\n\n\n"
    append text "------------------------------------------------------------------------\n"
    append text "| Clock Summary\n| -------------\n"
    append text "------------------------------------------------------------------------\n\n"
    append text "Clock       Waveform(ns)         Period(ns)      Frequency(MHz)\n"
    append text "-----       ------------         ----------      --------------\n"
    append text [format "%-11s {0.000 %.3f}        %s          %.3f\n\n\n" $clk [expr {$period / 2}] $period [expr {1000.0 / $period}]]
    append text "------------------------------------------------------------------------\n"
    append text "| Intra Clock Table\n| -----------------\n"
    append text "------------------------------------------------------------------------\n\n"
    append text "Clock             WNS(ns)      TNS(ns)\n"
    append text "-----             -------      -------\n"
    append text [format "%-16s %8.3f  %11.3f\n\n" $clk $wns [expr {$wns < 0 ? $wns * 40 : 0.0}]]
    set fh [open [dict get $o -file] w]
    puts -nonewline $fh $text
    close $fh
    ::stub::rec file timing [dict get $o -file]
    return
}

proc report_utilization {args} {
    lassign [::stub::parse report_utilization {-file 1 -hierarchical 0 -quiet 0} $args] o pos
    set fh [open [dict get $o -file] w]
    puts $fh "Utilization report (vtaforge stub)"
    close $fh
    return
}

proc report_clocks {args} {
    lassign [::stub::parse report_clocks {-file 1 -quiet 0} $args] o pos
    set fh [open [dict get $o -file] w]
    puts $fh "Clock report (vtaforge stub): [::stub::clock_name] [::stub::act_mhz] MHz"
    close $fh
    return
}
