// A real JMS 1.1 service and requester (ActiveMQ's OpenWire client, Debian's jars) for the NATS bridge tests.
//   java -cp <jars> JmsService.java serve <broker-url> <queue> <count>
//       answers <count> requests (TextMessage or BytesMessage) to JMSReplyTo with the request's
//       JMSCorrelationID, body "echo:" + the body, every String property copied as "echo_<name>",
//       and the property served_by=java; prints READY once consuming, then one line per request:
//       REQUEST <correlation-id> <type> <priority> <property=value;...sorted> <body hex> <JMSReplyTo>
//   java -cp <jars> JmsService.java request <broker-url> <queue> <count>
//       sends <count> TextMessages "req-<i>" with JMSReplyTo a temporary queue, JMSCorrelationID
//       "java-<i>" and the property trace=t-<i>; prints one line per reply:
//       REPLY <correlation-id> <property=value;...sorted> <body hex>   (or TIMEOUT <i>)
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;
import javax.jms.*;
import org.apache.activemq.ActiveMQConnectionFactory;

public class JmsService {
    static String hex(byte[] data) {
        StringBuilder out = new StringBuilder();
        for (byte b : data) out.append(String.format("%02x", b));
        return out.length() == 0 ? "-" : out.toString();
    }

    static byte[] body(Message m) throws Exception {
        if (m instanceof TextMessage) {
            String text = ((TextMessage) m).getText();
            return text == null ? new byte[0] : text.getBytes("UTF-8");
        }
        if (m instanceof BytesMessage) {
            BytesMessage bm = (BytesMessage) m;
            byte[] data = new byte[(int) bm.getBodyLength()];
            bm.readBytes(data);
            return data;
        }
        return new byte[0];
    }

    static String props(Message m) throws Exception {
        List<String> out = new ArrayList<>();
        for (Enumeration<?> e = m.getPropertyNames(); e.hasMoreElements();) {
            String name = (String) e.nextElement();
            if (name.startsWith("JMSX")) continue;
            out.add(name + "=" + m.getObjectProperty(name));
        }
        Collections.sort(out);
        return out.isEmpty() ? "-" : String.join(";", out);
    }

    public static void main(String[] args) throws Exception {
        ConnectionFactory factory = new ActiveMQConnectionFactory(args[1]);
        Connection connection = factory.createConnection();
        connection.start();
        int count = Integer.parseInt(args[3]);
        try {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            if (args[0].equals("serve")) {
                MessageConsumer consumer = session.createConsumer(session.createQueue(args[2]));
                MessageProducer producer = session.createProducer(null);
                System.out.println("READY");
                System.out.flush();
                for (int i = 0; i < count; i++) {
                    Message m = consumer.receive(120000);
                    if (m == null) { System.out.println("NO REQUEST"); System.exit(2); }
                    byte[] data = body(m);
                    System.out.println("REQUEST " + m.getJMSCorrelationID() + " " + m.getJMSType() + " "
                        + m.getJMSPriority() + " " + props(m) + " " + hex(data) + " " + m.getJMSReplyTo());
                    System.out.flush();
                    BytesMessage reply = session.createBytesMessage();
                    reply.writeBytes(("echo:" + new String(data, "UTF-8")).getBytes("UTF-8"));
                    reply.setJMSCorrelationID(m.getJMSCorrelationID());
                    for (Enumeration<?> e = m.getPropertyNames(); e.hasMoreElements();) {
                        String name = (String) e.nextElement();
                        if (!name.startsWith("JMSX")) reply.setStringProperty("echo_" + name, m.getStringProperty(name));
                    }
                    reply.setStringProperty("served_by", "java");
                    producer.send(m.getJMSReplyTo(), reply);
                }
            } else {
                TemporaryQueue replies = session.createTemporaryQueue();
                MessageProducer producer = session.createProducer(session.createQueue(args[2]));
                MessageConsumer consumer = session.createConsumer(replies);
                for (int i = 0; i < count; i++) {
                    TextMessage request = session.createTextMessage("req-" + i);
                    request.setJMSReplyTo(replies);
                    request.setJMSCorrelationID("java-" + i);
                    request.setStringProperty("trace", "t-" + i);
                    producer.send(request);
                }
                for (int i = 0; i < count; i++) {
                    Message reply = consumer.receive(60000);
                    if (reply == null) { System.out.println("TIMEOUT " + i); continue; }
                    System.out.println("REPLY " + reply.getJMSCorrelationID() + " " + props(reply) + " "
                        + hex(body(reply)));
                }
            }
        } finally {
            connection.close();
        }
    }
}
