/* Linked with the real libibverbs and librdmacm. Prints the devices it sees;
 * with "full", also connects to itself over 127.0.0.1 and moves data, so that
 * every call of the emulated device is checked under LD_PRELOAD:
 *
 *   preload_check            devices: 0          (no RDMA device on this host)
 *   LD_PRELOAD=.../liboobx-verbs-emu.so preload_check full
 *                            devices: 1 emu0 ... ok
 *
 * Built a second time as a module (-DPRELOAD_MODULE, preload_check_mod.so)
 * that preload_dlopen loads with dlopen, as the core loads liboobx-verbs.so.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define DIE(...) \
    do { \
        printf("preload_check: " __VA_ARGS__); \
        printf("\n"); \
        exit(1); \
    } while (0)

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int want)
{
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    if (poll(&p, 1, 3000) != 1) DIE("no CM event (waiting for %s)", rdma_event_str(want));
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ch, &ev)) DIE("rdma_get_cm_event: %s", strerror(errno));
    if ((int)ev->event != want) DIE("got %s (status %d), want %s", rdma_event_str(ev->event), ev->status,
                                    rdma_event_str(want));
    return ev;
}

static void wait_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
    for (int i = 0; i < 3000; i++) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0) DIE("ibv_poll_cq: %d", n);
        if (n == 1) {
            if (wc->status != IBV_WC_SUCCESS) DIE("completion: %s", ibv_wc_status_str(wc->status));
            return;
        }
        usleep(1000);
    }
    DIE("no completion");
}

#ifdef PRELOAD_MODULE
int preload_check_main(int argc, char **argv);
int preload_check_main(int argc, char **argv)
#else
int main(int argc, char **argv)
#endif
{
    alarm(20);
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    printf("devices: %d", list ? n : 0);
    for (int i = 0; list && i < n; i++) printf(" %s", ibv_get_device_name(list[i]));
    printf("\n");
    if (argc < 2 || strcmp(argv[1], "full") != 0) {
        if (list) ibv_free_device_list(list);
        return 0;
    }
    if (!list || n < 1) DIE("no device");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    if (!ctx) DIE("ibv_open_device");
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, 1, &pa) || pa.state != IBV_PORT_ACTIVE) DIE("ibv_query_port");
    struct ibv_pd *qpd = ibv_alloc_pd(ctx);
    char tmp[64];
    struct ibv_mr *qmr = ibv_reg_mr(qpd, tmp, sizeof(tmp), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    if (!qmr) DIE("ibv_reg_mr (optional access flag)");
    ibv_dereg_mr(qmr);
    ibv_dealloc_pd(qpd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);

    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *lid, *cid, *sid;
    if (!ch || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) || rdma_create_id(ch, &cid, NULL, RDMA_PS_TCP))
        DIE("rdma_create_id");
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (rdma_bind_addr(lid, (struct sockaddr *)&a) || rdma_listen(lid, 4)) DIE("bind/listen: %s", strerror(errno));
    a.sin_port = rdma_get_src_port(lid);
    if (rdma_resolve_addr(cid, NULL, (struct sockaddr *)&a, 1000)) DIE("rdma_resolve_addr");
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(cid, 1000)) DIE("rdma_resolve_route");
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));

    struct ibv_pd *pd = ibv_alloc_pd(cid->verbs);
    struct ibv_cq *cq = ibv_create_cq(cid->verbs, 64, NULL, NULL, 0);
    static char buf[8192];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!pd || !cq || !mr) DIE("pd/cq/mr");
    struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                   .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
    if (rdma_create_qp(cid, pd, &qa)) DIE("rdma_create_qp (client)");
    struct rdma_conn_param cp = { .private_data = "hi", .private_data_len = 2, .rnr_retry_count = 7 };
    if (rdma_connect(cid, &cp)) DIE("rdma_connect");
    struct rdma_cm_event *ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    sid = ev->id;
    if (memcmp(ev->param.conn.private_data, "hi", 2)) DIE("private data");
    rdma_ack_cm_event(ev);
    if (rdma_create_qp(sid, pd, &qa)) DIE("rdma_create_qp (server)");
    if (rdma_accept(sid, NULL)) DIE("rdma_accept");
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ESTABLISHED));
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ESTABLISHED));

    struct ibv_wc wc;
    struct ibv_sge rs = { (uintptr_t)buf + 4096, 64, mr->lkey }, ss = { (uintptr_t)buf, 6, mr->lkey };
    struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
    memcpy(buf, "hello", 6);
    if (ibv_post_recv(sid->qp, &rw, &rbad)) DIE("ibv_post_recv");
    struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED }, *sbad;
    if (ibv_post_send(cid->qp, &sw, &sbad)) DIE("ibv_post_send");
    wait_wc(cq, &wc);
    wait_wc(cq, &wc);
    if (strcmp(buf + 4096, "hello")) DIE("SEND data");
    sw.opcode = IBV_WR_RDMA_READ;
    sw.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
    sw.wr.rdma.rkey = mr->rkey;
    ss.addr = (uintptr_t)buf + 100;
    if (ibv_post_send(cid->qp, &sw, &sbad)) DIE("ibv_post_send (read)");
    wait_wc(cq, &wc);
    if (wc.opcode != IBV_WC_RDMA_READ || strcmp(buf + 100, "hello")) DIE("READ data");
    if (rdma_disconnect(cid)) DIE("rdma_disconnect");
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_DISCONNECTED));
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_DISCONNECTED));
    rdma_destroy_qp(cid);
    rdma_destroy_qp(sid);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    rdma_destroy_id(sid);
    rdma_destroy_id(cid);
    rdma_destroy_id(lid);
    rdma_destroy_event_channel(ch);
    printf("ok\n");
    return 0;
}
