// an infinite template recursion: stopped at the reader's depth limit
template <int N>
struct R {
  static constexpr int v = R<N + 1>::v;
};
constexpr int x = R<0>::v;
