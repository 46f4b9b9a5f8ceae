#pragma once

namespace loom::nccl {

// Installs Loom's bundled plans into <cache root>/default unless this version's are there, before the
// first Executor of the process loads that folder: an application that only preloads this library
// has no Python package to do it. A failure is a warning (the job runs with the plans it finds, or
// forwards); LOOM_DEFAULT_PLANS=0 turns it off with the plans themselves. `device` is for the log.
void installDefaultPlansOnFirstUse(int device);

}  // namespace loom::nccl
