/* The first-call costs of what a rank's init does once: libsodium's start,
 * the interface list, the CPU count, host facts, a listener. A measurement
 * program for docs/scaling.md, not part of the library:
 *   cc -O2 -o init-costs docs/perf/scale/init-costs.c -lsodium && ./init-costs */
#define _GNU_SOURCE
#include <sodium.h>
#include <stdio.h>
#include <time.h>
#include <ifaddrs.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/timerfd.h>
#include <sys/epoll.h>
#include <sys/resource.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define T(name, ...) do{double t_a=now(); __VA_ARGS__; double t_b=now(); printf("%-28s %7.1f us\n", name, (t_b-t_a)*1e6);}while(0)
int main(){
 T("sodium_init", if(sodium_init()<0) return 1);
 struct ifaddrs *ifa; T("getifaddrs", getifaddrs(&ifa); freeifaddrs(ifa));
 T("getifaddrs again", getifaddrs(&ifa); freeifaddrs(ifa));
 T("sysconf online", sysconf(_SC_NPROCESSORS_ONLN));
 char buf[256]; T("boot_id", int fd=open("/proc/sys/kernel/random/boot_id",O_RDONLY); read(fd,buf,64); close(fd));
 T("readlink ns", readlink("/proc/self/ns/pid",buf,64));
 T("port range", int fd=open("/proc/sys/net/ipv4/ip_local_port_range",O_RDONLY); read(fd,buf,64); close(fd));
 T("timerfd+epoll", int a=timerfd_create(CLOCK_MONOTONIC,TFD_NONBLOCK); int e=epoll_create1(0); close(a); close(e));
 T("listen socket", int s=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in sa={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)}; bind(s,(void*)&sa,sizeof sa); listen(s,4096); close(s));
 T("listen socket 2", int s=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in sa={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)}; bind(s,(void*)&sa,sizeof sa); listen(s,4096); close(s));
 struct rusage ru; T("getrusage", getrusage(RUSAGE_SELF,&ru));
 unsigned char r[16]; T("randombytes 16", randombytes_buf(r,16));
 unsigned char h[32]; T("generichash 200B", crypto_generichash(h,32,(unsigned char*)buf,200,r,16));
 return 0;}
