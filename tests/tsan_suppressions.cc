// ThreadSanitizer suppressions linked into every test (used only under --config=tsan).
// oneDNN is not built with ThreadSanitizer: its primitive cache hands primitive descriptors from
// one thread to another through synchronisation TSan cannot see, which it reports as races
// between two devices creating the same convolution. dpe's own code stays checked.
extern "C" const char* __tsan_default_suppressions() {
  return "race:libdnnl.so\n"
         "called_from_lib:libgomp.so\n";
}
