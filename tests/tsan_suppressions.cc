// ThreadSanitizer suppressions linked into every test (used only under --config=tsan).
// oneDNN and libgomp are not built with ThreadSanitizer, so synchronisation inside them is
// invisible to it. The main source of such reports, oneDNN's global primitive cache, is switched
// off for TSan runs in .bazelrc; these lines cover what is left inside those libraries.
// oneTBB's concurrent queue (the device workers' task queue) recycles its pages through
// libtbb's cache-aligned allocator, which is not instrumented either: a page reused after a
// try_pop reads as a race on the page's construction. dpe's own code stays checked.
extern "C" const char* __tsan_default_suppressions() {
  return "race:libdnnl.so\n"
         "called_from_lib:libgomp.so\n"
         "race:tbb::detail::d2::micro_queue\n";
}
