/* The sanitizer build must stop at a float-to-integer cast out of range (the
 * undefined behaviour a 9e18 v2 timeout once hit in infer.c, and which GCC 12's
 * -fsanitize=undefined leaves unchecked): this program makes one, and in that
 * build it must fail with UBSan's report (tests/expect-report.sh). Run alone it says whether the cast went by. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  volatile double d = strtod(argc > 1 ? argv[1] : "9e21", NULL);
  unsigned long long u = (unsigned long long)d;
  printf("%llu: the cast went unchecked\n", u);
  return 0;
}
