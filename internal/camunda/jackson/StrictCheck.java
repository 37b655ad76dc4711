// StrictCheck reads lease objects and data-directory markers the way Camunda
// 8.9's S3 node-ID provider reads them: records of the same shapes as its
// Lease, NodeInstance, Version, VersionMappings and DirectoryInitializationInfo,
// a default `new ObjectMapper()` and the same metadata rules. It is our own
// program, written from the format, so the Go model in internal/camunda can be
// checked against the real Jackson parser (see JacksonCheck in the Go package).
//
// Usage: java StrictCheck (lease BODY META | dir BODY)...
// META is a JSON object of string values: the object's user metadata as the
// S3 SDK returns it ({} when the object has none).
// Prints one line per object; the Go side prints the same format.
import com.fasterxml.jackson.annotation.JsonCreator;
import com.fasterxml.jackson.annotation.JsonValue;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.SortedMap;

public final class StrictCheck {
  static final ObjectMapper MAPPER = new ObjectMapper();

  // Camunda declares only @JsonValue and relies on its (newer) Jackson to take
  // the single-argument constructor as a delegating creator; Jackson 2.14
  // (Debian's) would read {"version":2} instead and reject a bare 2, so the
  // creator mode is spelled out here to reproduce Camunda's behaviour: a
  // Version is read exactly as a Java long is.
  public record Version(@JsonValue long version) {
    @JsonCreator(mode = JsonCreator.Mode.DELEGATING)
    public Version {
      if (version < 0) {
        throw new IllegalArgumentException("version must be non-negative");
      }
    }
  }

  public record NodeInstance(int id, Version version) {
    public NodeInstance {
      if (id < 0) {
        throw new IllegalArgumentException("id cannot be negative, was " + id);
      }
    }
  }

  public record VersionMappings(SortedMap<Integer, Version> mappingsByNodeId) {}

  public record Lease(
      String taskId, long timestamp, NodeInstance nodeInstance, VersionMappings knownVersionMappings) {
    public Lease {
      Objects.requireNonNull(taskId, "taskId cannot be null");
      if (taskId.isEmpty()) {
        throw new IllegalArgumentException("taskId cannot be empty");
      }
      Objects.requireNonNull(nodeInstance, "nodeInstance cannot be null");
      Objects.requireNonNull(knownVersionMappings, "knownVersionMappings cannot be null");
    }
  }

  public record DirectoryInitializationInfo(
      long initializedAt, Version version, Version initializedFrom) {
    public DirectoryInitializationInfo {
      if (initializedAt < 0L) {
        throw new IllegalArgumentException("initializedAt cannot be negative");
      }
      if (version == null) {
        throw new IllegalArgumentException("version cannot be null");
      }
    }
  }

  /** The user metadata of a lease object: taskid, version, acquirable. */
  record Metadata(Optional<String> task, Version version, boolean acquirable) {
    Metadata {
      Objects.requireNonNull(task, "task cannot be null");
      if (task.isPresent() && task.get().isEmpty()) {
        throw new IllegalArgumentException("task cannot be empty");
      }
      Objects.requireNonNull(version, "version cannot be null");
    }

    static Metadata fromMap(Map<String, String> map) {
      if (map.isEmpty()) {
        return null;
      }
      try {
        String t = map.get("taskid");
        Optional<String> task = t != null && !t.isEmpty() ? Optional.of(t) : Optional.empty();
        Version version = new Version(Long.parseLong(map.get("version")));
        String a = map.get("acquirable");
        boolean acquirable = a == null || Boolean.parseBoolean(a);
        return new Metadata(task, version, acquirable);
      } catch (Exception e) {
        throw new IllegalArgumentException("Failed to deserialize metadata, map is " + map, e);
      }
    }
  }

  static String lease(byte[] body, Map<String, String> meta) throws Exception {
    // The order of Camunda's getLease: body, then metadata, then StoredLease.of.
    Lease lease = body.length > 0 ? MAPPER.readValue(body, Lease.class) : null;
    Metadata md = Metadata.fromMap(meta);
    if (lease == null) {
      long v = md == null ? 0 : md.version().version();
      boolean acq = md == null || md.acquirable();
      return "Uninitialized v" + v + " acquirable=" + acq;
    }
    Objects.requireNonNull(md, "metadata cannot be null");
    if (!Objects.equals(md.task(), Optional.of(lease.taskId()))) {
      throw new IllegalStateException("TaskId in metadata and in lease do not match");
    }
    if (!Objects.equals(md.version(), lease.nodeInstance().version())) {
      throw new IllegalStateException("Version in metadata and in lease do not match");
    }
    StringBuilder known = new StringBuilder("{");
    SortedMap<Integer, Version> m = lease.knownVersionMappings().mappingsByNodeId();
    if (m == null) {
      known.append("null");
    } else {
      String sep = "";
      for (var e : m.entrySet()) {
        known.append(sep).append(e.getKey()).append(':');
        known.append(e.getValue() == null ? "null" : Long.toString(e.getValue().version()));
        sep = ",";
      }
    }
    known.append('}');
    return "Initialized task="
        + MAPPER.writeValueAsString(lease.taskId())
        + " node="
        + lease.nodeInstance().id()
        + " v"
        + lease.nodeInstance().version().version()
        + " ts="
        + lease.timestamp()
        + " acquirable="
        + md.acquirable()
        + " known="
        + known;
  }

  static String dir(byte[] body) throws Exception {
    DirectoryInitializationInfo d = MAPPER.readValue(body, DirectoryInitializationInfo.class);
    if (d == null) {
      return "Dir null";
    }
    return "Dir at="
        + d.initializedAt()
        + " v"
        + d.version().version()
        + " from="
        + (d.initializedFrom() == null ? "null" : Long.toString(d.initializedFrom().version()));
  }

  public static void main(String[] args) throws Exception {
    for (int i = 0; i < args.length; ) {
      String kind = args[i++];
      String line;
      try {
        byte[] body = Files.readAllBytes(Path.of(args[i++]));
        if (kind.equals("lease")) {
          Map<String, String> meta =
              MAPPER.readValue(Files.readAllBytes(Path.of(args[i++])), new TypeReference<>() {});
          line = lease(body, meta);
        } else if (kind.equals("dir")) {
          line = dir(body);
        } else {
          throw new IllegalArgumentException("unknown kind " + kind);
        }
      } catch (Exception e) {
        line = "ERROR " + e.getClass().getSimpleName() + ": " + e.getMessage();
      }
      System.out.println(line.replace('\n', ' ').replace('\r', ' '));
    }
  }
}
