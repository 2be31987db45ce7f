// block_pieces: which of a block's pieces (runtime/model/layout.h's Piece, in its
// family's forward order) one forward or backward call runs. Sub-block wrap
// units hold some pieces of a block each, and each unit's compute op runs its
// range; a whole block is the default. Between the calls of one block, what
// flows lives in the block's saved slot (forward) and in the backward
// scratch (backward), exactly where one whole call keeps it.
#pragma once

struct block_pieces {
  int first = 0;
  int end = 64;  // past the last piece; the default covers every piece
  constexpr bool has(int piece) const { return piece >= first && piece < end; }
};
