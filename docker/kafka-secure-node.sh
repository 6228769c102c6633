#!/bin/sh
# Entry point of a Kafka node under docker-compose.secure.yml (docs/security.md, "Docker").
# The passwords come from Docker secrets (files under /run/secrets), never from the compose file or argv
# of the broker: this script puts them into the image's KAFKA_* settings and execs the image's own start.
# Kafka takes the admin's SCRAM credential for a new KRaft cluster only on the storage tool's command line
# (format --add-scram): for the seconds of a node's first format the admin password is on that command line
# inside this container (never on a restart: formatted storage is not formatted again).
set -eu
admin=$(cat /run/secrets/kafka-admin-password)
ctl=$(cat /run/secrets/kafka-controller-password)
scram=org.apache.kafka.common.security.scram.ScramLoginModule
plain=org.apache.kafka.common.security.plain.PlainLoginModule
# listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config (the image maps "_" to ".", "__" to "_", "___" to "-")
export KAFKA_LISTENER_NAME_SASL__SSL_SCRAM___SHA___512_SASL_JAAS_CONFIG="$scram required username=\"admin\" password=\"$admin\";"
# listener.name.controller.plain.sasl.jaas.config: the nodes' own PLAIN user on the controller listener
export KAFKA_LISTENER_NAME_CONTROLLER_PLAIN_SASL_JAAS_CONFIG="$plain required username=\"controller\" password=\"$ctl\" user_controller=\"$ctl\";"

# the healthcheck's client settings (admin over SASL_SSL, trusting the mounted CA), mode 0600
umask 077
cat > /tmp/admin-client.properties <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$scram required username="admin" password="$admin";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/secrets/ca.pem
PROPS

if [ ! -f "$KAFKA_LOG_DIRS/meta.properties" ]; then
  cat > /tmp/format.properties <<PROPS
process.roles=$KAFKA_PROCESS_ROLES
node.id=$KAFKA_NODE_ID
controller.quorum.voters=$KAFKA_CONTROLLER_QUORUM_VOTERS
controller.listener.names=$KAFKA_CONTROLLER_LISTENER_NAMES
listeners=$KAFKA_LISTENERS
listener.security.protocol.map=$KAFKA_LISTENER_SECURITY_PROTOCOL_MAP
inter.broker.listener.name=$KAFKA_INTER_BROKER_LISTENER_NAME
log.dirs=$KAFKA_LOG_DIRS
PROPS
  /opt/kafka/bin/kafka-storage.sh format --cluster-id "$CLUSTER_ID" -c /tmp/format.properties \
    --add-scram "SCRAM-SHA-512=[name=admin,password=$admin]"
  rm -f /tmp/format.properties
fi
umask 022
exec /etc/kafka/docker/run
