/* Page-fault probe for docs/design.md (node-aware allgather, the result buffer):
 * 1.3 MB (10,240 cards of 128 B) copied into fresh memory, into fresh memory
 * populated first (MADV_POPULATE_WRITE), and into mapped memory, 100 times each.
 * gcc -O2 fault-probe.c -o fault-probe && ./fault-probe   (16 at once: for i in $(seq 16); do ./fault-probe & done; wait) */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t n=10240*128; int it=100;
  char *src=malloc(n); memset(src,7,n);
  double tot[3]={0};
  for(int i=0;i<it;i++) for(int mode=0;mode<3;mode++){
    char *d=mmap(NULL,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
    if(mode==2) memset(d,0,n);
    double t0=now();
    if(mode==1) madvise(d,n,MADV_POPULATE_WRITE);
    memcpy(d,src,n);
    tot[mode]+=now()-t0;
    munmap(d,n);
  }
  printf("fault+copy %.0f us, populate+copy %.0f us, copy into mapped %.0f us\n",tot[0]/it*1e6,tot[1]/it*1e6,tot[2]/it*1e6);
}
