#pragma once
#include <nanobind/nanobind.h>

namespace ff::python {

// Op facts, dtype rules and torch expressions for the Python front end, so it
// keeps no op or dtype table of its own (op_bindings.cc).
void bind_op_registry(nanobind::module_& m);

}  // namespace ff::python
