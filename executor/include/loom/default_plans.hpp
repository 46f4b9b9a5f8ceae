#pragma once

// Installing the bundled default plans into <cache root>/default, where the plan registry loads them
// (cache_dir.hpp). One implementation for the Python package (`loom install-plans`, and each
// loom.Communicator on first use) and for libloom_nccl.so (on first use, without Python).
//
// The bundled plans are plans/default/*.json in a source checkout, loom/default_plans/*.json.gz in a
// wheel. Installed, each is <target>/NAME.json.gz (gzip: the set is about 1.6 MiB instead of 37 MiB of
// JSON), beside
//   .index      what the registry selects each plan by, so that it decodes a plan only when first used
//               (plan_index.hpp);
//   .installed  the stamp: the Loom version, the layout, and every bundled file's name and size. A
//               folder whose stamp is not that of the bundled plans at hand is installed again.
//   .manifest   the plan files the install wrote: all that a later install may remove (the user's own
//               files in the folder are never deleted). Lock and stamp are never opened through links.
// Every file is written to a temporary file in the folder and renamed into place, so a process that
// loads the folder meanwhile never reads half a file.

#include <string>
#include <vector>

namespace loom {

inline constexpr char kInstalledStampName[] = ".installed";

// The bundled plans this library was built with: the source checkout's plans/default when it is
// there (a build tree, an editable install), else default_plans/ beside the shared library that
// holds this code (a wheel). An InvalidArgument error when neither holds plans.
std::string bundledPlansDirectory();
// The plan files of a bundled folder (*.json, *.json.gz), sorted by name.
std::vector<std::string> bundledPlanFiles(const std::string& bundled);
// What <target>/.installed holds once the plans of `bundled` are installed there.
std::string installedStamp(const std::string& bundled);

// Installs the plans of `bundled` into `target` (created if missing) and writes the manifest, the index and
// the stamp; returns the installed plan files, sorted. A file that already holds its plan is left alone
// unless `force`. Of the other files in `target`, only plans an earlier install wrote (its .manifest, or
// its stamp) are removed, and only as regular files; anything else is left alone and named on stderr.
std::vector<std::string> installDefaultPlans(const std::string& bundled, const std::string& target, bool force = false);
// installDefaultPlans() unless <target>/.installed is already installedStamp(bundled); true when it
// installed. Processes of one host may call it at once: one installs (holding <target>/.install.lock)
// while the others wait, then find the stamp.
bool ensureDefaultPlansInstalled(const std::string& bundled, const std::string& target);

}  // namespace loom
