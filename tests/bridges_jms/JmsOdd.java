// Sends, with ActiveMQ's OpenWire client (Debian's jars), to each queue named after the URL:
//   1. a MapMessage (k=v, JMSCorrelationID map-1), 2. a persistent TextMessage "text",
//   3. a NON_PERSISTENT TextMessage "fleeting".
//   java -cp <jars> JmsOdd.java <broker-url> <queue> [<queue> ...]
import javax.jms.*;
import org.apache.activemq.ActiveMQConnectionFactory;

public class JmsOdd {
    public static void main(String[] args) throws Exception {
        Connection connection = new ActiveMQConnectionFactory(args[0]).createConnection();
        connection.start();
        try {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            for (int i = 1; i < args.length; i++) {
                MessageProducer producer = session.createProducer(session.createQueue(args[i]));
                MapMessage map = session.createMapMessage();
                map.setString("k", "v");
                map.setJMSCorrelationID("map-1");
                producer.send(map, DeliveryMode.PERSISTENT, 4, 0);
                producer.send(session.createTextMessage("text"), DeliveryMode.PERSISTENT, 4, 0);
                producer.send(session.createTextMessage("fleeting"), DeliveryMode.NON_PERSISTENT, 4, 0);
            }
            System.out.println("SENT");
        } finally {
            connection.close();
        }
    }
}
