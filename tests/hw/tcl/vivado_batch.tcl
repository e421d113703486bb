# `vivado -mode batch -source SCRIPT [-notrace] [-log FILE] [-journal FILE] [-tclargs ...]`
# under tclsh: loads the Vivado stand-ins (vivado_stub.tcl) and runs SCRIPT.  Like Vivado in
# batch mode, an error in SCRIPT prints "ERROR: ..." and exits with status 1.  The log file's
# folder must exist (the log is opened before the script runs; issue 8 measured a build.sh
# whose -log folder was never created).  Written for vtaforge's tests.
set mode ""
set script ""
set log ""
set journal ""
set tclargs {}
for {set i 0} {$i < [llength $argv]} {incr i} {
    set a [lindex $argv $i]
    switch -- $a {
        -mode { set mode [lindex $argv [incr i]] }
        -source { set script [lindex $argv [incr i]] }
        -log { set log [lindex $argv [incr i]] }
        -journal { set journal [lindex $argv [incr i]] }
        -notrace - -nojournal - -nolog {}
        -tclargs { set tclargs [lrange $argv [expr {$i + 1}] end]; break }
        default { puts stderr "ERROR: \[Common 17-170\] Unknown option '$a'"; exit 1 }
    }
}
if {$mode ne "batch" || $script eq ""} {
    puts stderr "ERROR: vivado stub: only -mode batch -source SCRIPT is supported"
    exit 1
}
foreach {what f} [list log $log journal $journal] {
    if {$f ne "" && ![file isdirectory [file dirname [file normalize $f]]]} {
        puts stderr "ERROR: \[Common 17-39\] cannot open $what file '$f': no such directory"
        exit 1
    }
}
if {$log ne ""} { close [open $log w] }
set argv $tclargs
set argc [llength $argv]
source [file join [file dirname [file normalize [info script]]] vivado_stub.tcl]
if {[catch {uplevel #0 [list source $script]} msg]} {
    puts "ERROR: $msg"
    if {$log ne ""} {
        set fh [open $log a]; puts $fh "ERROR: $msg"; close $fh
    }
    exit 1
}
exit 0
