// Draws the scaling plot by running bench/scale/plot_scale.py on the JSON report.
//
// The script is looked for next to the executable, in ../share/lockstep/ (installed), then in
// the source tree (LOCKSTEP_SCALE_PLOT_SCRIPT, set by CMake). The interpreter is
// $LOCKSTEP_PYTHON when set, else the first of python3 on PATH and /usr/bin/python3 (where
// Debian's python3-matplotlib lives) that has matplotlib. Returns true when the PNG was
// written; otherwise prints a warning that says how to install what is missing (the JSON is the
// primary output).
#pragma once

#include <string>

// json_kept: the JSON stays after the run (so the warning can say how to plot it later).
bool draw_scale_plot(const std::string& json_path, const std::string& png_path, bool json_kept);
