/* The ThreadSanitizer build must stop at a data race: two threads bump one
 * counter with no lock between them (what a metric shard written by two
 * fronts would be). In that build it must fail with TSan's report
 * (tests/expect-report.sh), so a build that stops instrumenting threads is seen. Run alone it prints the count it reached. */
#include <pthread.h>
#include <stdio.h>

static long counter;

static void *bump(void *arg) {
  for (int i = 0; i < 100000; i++) counter++;
  return arg;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, bump, NULL) != 0) return 2;
  bump(NULL);
  pthread_join(t, NULL);
  printf("%ld: the race went unseen\n", counter);
  return 0;
}
