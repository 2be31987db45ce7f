// BufferTables: kBuffers, and with --check the red zones after custom
// layers' arrays (kInnerRedZones) and each buffer's life (kBufferLife).
#include <fmt/format.h>

#include "codegen/emit/CppText.h"
#include "codegen/emit/Tables.h"
#include "codegen/planner/Report.h"

namespace fsdpgen::emit {

std::string schedule_table(const EmitContext& c) {
  return "constexpr const char* kScheduleText =\n" + cpp_string_lines(schedule_text(c.s), "    ") +
         ";\n\n";
}

std::string buffer_tables(const EmitContext& c, const ProgramNotes& n) {
  std::string out = "// Buffers: name, memory space, arena offset, bytes, persistent.\n";
  out += "constexpr program_buffer kBuffers[] = {\n";
  for (const Buffer& b : c.s.buffers)
    out += wrap_line(fmt::format("    {{{}, memory_space::{}, {}, {}, {}}},", cpp_string(b.name),
                                 b.space == MemSpace::Device ? "device" : "host", c.offset(b.id),
                                 b.bytes, b.persistent),
                     "     ") +
           "\n";
  out += "};\n\n";
  if (!n.inner_red_zones.empty()) {
    out += "// Red zones after custom layers' arrays (--check): buffer, offset, bytes, array.\n";
    out += "constexpr program_red_zone kInnerRedZones[] = {\n";
    for (const auto& [buffer, offset, bytes, name] : n.inner_red_zones)
      out += fmt::format("    {{{}, {}, {}, {}}},\n", buffer, offset, bytes, cpp_string(name));
    out += "};\n\n";
  }
  if (c.m.red_zone_bytes > 0) {  // fsdpgen build --check (runtime/cpu/red_zones.h)
    out += "// Buffers' lives (--check): the issue positions of their first use and Free.\n";
    out += "constexpr program_buffer_life kBufferLife[] = {\n";
    for (const Buffer& b : c.s.buffers) {
      const Placement& pl = c.m.placements[static_cast<size_t>(b.id)];
      out += fmt::format("    {{{}, {}}},  // {}\n", pl.first_op, pl.last_op, b.name);
    }
    out += "};\n\n";
  }
  return out;
}

}  // namespace fsdpgen::emit
