#include "kernel/sm90_ss_tile.h"

namespace ff::codegen {

Sm90SsTile sm90_ss_tile(int64_t n, int64_t k, bool staged, bool wide, bool packed) {
  Sm90SsTile t;
  t.phase_packed = packed;
  t.wide = packed || (wide && n % 128 == 0);
  t.bn = t.wide ? 256 : n <= 64 ? 64 : n <= 128 ? 128 : 256;
  t.k_whole = k % Sm90SsTile::bk == 0;
  t.n_whole = n % (t.wide ? t.bm : t.bn) == 0;
  // Staged where a warpgroup's runs are 128 rows. H200, a 3x3 conv + relu
  // written NCHW: 128 output channels (256 x 128 tiles) 0.630 -> 0.606 ms,
  // the seed's conv with its epilogue 1.96 -> 1.72 ms; 256 channels (128 x
  // 256 tiles, eight 64-row stagings a tile) 0.191 -> 0.233 ms.
  t.staged = staged && t.warpgroup_rows() == 128;
  return t;
}

}  // namespace ff::codegen
