// A real JMS 1.1 client (ActiveMQ's OpenWire client, Debian's jars) for test_java_client.py.
//   java -cp <jars> JmsProbe.java <broker-url> <receive-queue> <count> <send-queue>
// Receives <count> messages and prints one line per message:
//   TEXT|BYTES <correlation-id> <type> <priority> <persistent> <color> <trace.id> <hops> <body as hex>
// then sends one TextMessage with a correlation id, a type and three properties, and prints SENT <id>.
import java.util.Enumeration;
import javax.jms.*;
import org.apache.activemq.ActiveMQConnectionFactory;

public class JmsProbe {
    static String hex(byte[] data) {
        StringBuilder out = new StringBuilder();
        for (byte b : data) out.append(String.format("%02x", b));
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        ConnectionFactory factory = new ActiveMQConnectionFactory(args[0]);
        Connection connection = factory.createConnection();
        connection.start();
        try {
            Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            MessageConsumer consumer = session.createConsumer(session.createQueue(args[1]));
            int count = Integer.parseInt(args[2]);
            for (int i = 0; i < count; i++) {
                Message m = consumer.receive(30000);
                if (m == null) { System.out.println("TIMEOUT"); System.exit(2); }
                String kind;
                byte[] body;
                if (m instanceof TextMessage) {
                    kind = "TEXT";
                    body = ((TextMessage) m).getText().getBytes("UTF-8");
                } else if (m instanceof BytesMessage) {
                    kind = "BYTES";
                    BytesMessage bm = (BytesMessage) m;
                    body = new byte[(int) bm.getBodyLength()];
                    bm.readBytes(body);
                } else {
                    kind = m.getClass().getSimpleName();
                    body = new byte[0];
                }
                System.out.println(kind + " " + m.getJMSCorrelationID() + " " + m.getJMSType() + " "
                    + m.getJMSPriority() + " " + (m.getJMSDeliveryMode() == DeliveryMode.PERSISTENT) + " "
                    + m.getStringProperty("color") + " " + m.getStringProperty("trace_DOT_id") + " "
                    + m.getStringProperty("jmsbridge_DOT_hops") + " " + hex(body));
                m.acknowledge();
            }
            MessageProducer producer = session.createProducer(session.createQueue(args[3]));
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            TextMessage out = session.createTextMessage("from java");
            out.setJMSCorrelationID("java-corr-1");
            out.setJMSType("reply");
            out.setStringProperty("region", "eu-west");
            out.setIntProperty("attempt", 3);
            out.setBooleanProperty("urgent", true);
            producer.send(out, DeliveryMode.PERSISTENT, 7, 0);
            System.out.println("SENT " + out.getJMSMessageID());
        } finally {
            connection.close();
        }
    }
}
