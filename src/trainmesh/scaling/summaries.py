"""What ``trainmesh scale`` and ``trainmesh project`` do, in one line each: apart from the commands
(``project`` imports torch), so that ``trainmesh --help`` lists the commands without importing torch."""

SCALE_SUMMARY = "Measure throughput, speedup and efficiency at 1, 2, 4, ... processes (strong and weak scaling)."
PROJECT_SUMMARY = "Project step time, efficiency and where scaling stops paying at N = 8 ... 1024 on a given link."
