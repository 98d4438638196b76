/* The DenseSync protocol (rpc/dense/dense_sync.proto): what its client
 * (rpc/dense/grpc_transport.c) and its server (ps/dense_service.c) must agree
 * on beyond the messages themselves. */
#ifndef SS_RPC_DENSE_WIRE_H
#define SS_RPC_DENSE_WIRE_H

#define SS_DENSE_M_JOIN       "/shadowsync.v1.DenseSync/Join"
#define SS_DENSE_M_LEAVE      "/shadowsync.v1.DenseSync/Leave"
#define SS_DENSE_M_EASGD      "/shadowsync.v1.DenseSync/EasgdExchange"
#define SS_DENSE_M_ROUND      "/shadowsync.v1.DenseSync/RoundMean"
#define SS_DENSE_M_CENTRAL    "/shadowsync.v1.DenseSync/ReadCentral"
#define SS_DENSE_M_HEARTBEAT  "/shadowsync.v1.DenseSync/Heartbeat"
#define SS_DENSE_M_CHECKPOINT "/shadowsync.v1.DenseSync/Checkpoint"

/* The longest group name the server accepts (chunk names included). */
#define SS_DENSE_MAX_GROUP_NAME 256

#endif
