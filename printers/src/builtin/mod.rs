//! The built-in types' Tables, ported from kube-apiserver's printers
//! (k8s.io/kubernetes `pkg/printers/internalversion`) and the table
//! convertors of the types that have no printer (the default one, Name and
//! Created At, and the APIService one). Each printer reads the JSON of the
//! versions listed in [`lookup`], mapped onto the internal type the API
//! server prints from (its conversion rules where they matter), and gives
//! the cells in the order of the type's column definitions, which are the
//! API server's own ([`columns`]).

mod apps;
mod batch;
mod cells;
mod cluster;
pub(crate) mod columns;
mod core;
mod events;
mod networking;
mod pod;
mod storage;

use self::cells::{age, name};
use crate::{
    error::PrinterError,
    metadata::Annotations,
    object::Field,
    table::{Item, Row},
    time::Clock,
};

/// A printer: one object's row, its cells of the Go types the API server
/// puts in them.
pub(crate) type Print = fn(Field<'_>, Clock) -> Result<Row, PrinterError>;

/// A built-in type's Table.
#[derive(Debug)]
pub(crate) struct Builtin {
    /// The objects' kind, for rows that carry the whole object.
    pub(crate) kind: &'static str,
    /// The column definitions' JSON.
    pub(crate) columns: &'static str,
    /// The row of one object.
    pub(crate) print: Print,
    /// How the Table is put together around the rows.
    pub(crate) shape: Shape,
    /// What the conversion to the internal type the API server prints does
    /// to the annotations (which rows carrying metadata show).
    pub(crate) internal_annotations: fn(&mut Annotations) -> Result<(), PrinterError>,
}

/// How a convertor puts its Table together, where convertors differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// kube-apiserver's printers (`printers.TableConvertor`): rows `[]`
    /// when there are none, column definitions unless noHeaders.
    Printer,
    /// A printer whose list is sorted: FlowSchemas by matching
    /// precedence, then name.
    PrinterSortedByPrecedence,
    /// `rest.NewDefaultTableConvertor`: rows `null` when there are none.
    Default,
    /// The APIService convertor, which sends column definitions even
    /// with noHeaders.
    AlwaysHeaders,
}

impl Builtin {
    /// The rows of `items`, in the order the API server lists them.
    pub(crate) fn rows<'a>(
        &self,
        items: &'a [Item<'a>],
        clock: Clock,
    ) -> Result<Vec<(Row, &'a Item<'a>)>, PrinterError> {
        let mut order: Vec<&Item<'_>> = items.iter().collect();
        if self.shape == Shape::PrinterSortedByPrecedence {
            // apihelpers.FlowSchemaSequence; names are unique, so the
            // (unstable) sort has one outcome.
            order.sort_by(|a, b| {
                let key = |i: &Item<'_>| {
                    let f = Field::of(&i.value);
                    (
                        f.at(&["spec", "matchingPrecedence"]).int(),
                        f.at(&["metadata", "name"]).str().to_owned(),
                    )
                };
                key(a).cmp(&key(b))
            });
        }
        order
            .into_iter()
            .map(|item| Ok(((self.print)(Field::of(&item.value), clock)?, item)))
            .collect()
    }
}

/// The printer of a built-in resource at a version whose JSON is read
/// here, None for any other (the request then goes to the API server).
pub(crate) fn lookup(group: &str, version: &str, resource: &str) -> Option<Builtin> {
    use Shape::{AlwaysHeaders, Default, Printer, PrinterSortedByPrecedence};
    let (kind, key, print, shape): (&str, &str, Print, Shape) = match (group, version, resource) {
        ("", "v1", "pods") => ("Pod", "*core.Pod", pod::pod, Printer),
        ("", "v1", "podtemplates") => (
            "PodTemplate",
            "*core.PodTemplate",
            core::pod_template,
            Printer,
        ),
        ("", "v1", "replicationcontrollers") => (
            "ReplicationController",
            "*core.ReplicationController",
            core::replication_controller,
            Printer,
        ),
        ("", "v1", "services") => ("Service", "*core.Service", core::service, Printer),
        ("", "v1", "endpoints") => ("Endpoints", "*core.Endpoints", core::endpoints, Printer),
        ("", "v1", "nodes") => ("Node", "*core.Node", core::node, Printer),
        ("", "v1", "namespaces") => ("Namespace", "*core.Namespace", core::namespace, Printer),
        ("", "v1", "configmaps") => ("ConfigMap", "*core.ConfigMap", core::config_map, Printer),
        ("", "v1", "secrets") => ("Secret", "*core.Secret", core::secret, Printer),
        ("", "v1", "serviceaccounts") => (
            "ServiceAccount",
            "*core.ServiceAccount",
            core::service_account,
            Printer,
        ),
        ("", "v1", "persistentvolumes") => (
            "PersistentVolume",
            "*core.PersistentVolume",
            storage::persistent_volume,
            Printer,
        ),
        ("", "v1", "persistentvolumeclaims") => (
            "PersistentVolumeClaim",
            "*core.PersistentVolumeClaim",
            storage::persistent_volume_claim,
            Printer,
        ),
        ("", "v1", "resourcequotas") => (
            "ResourceQuota",
            "*core.ResourceQuota",
            core::resource_quota,
            Printer,
        ),
        ("", "v1", "limitranges") => ("LimitRange", "default", name_and_creation, Default),
        ("", "v1", "events") => ("Event", "*core.Event", events::core_event, Printer),
        ("events.k8s.io", "v1", "events") => {
            ("Event", "*core.Event", events::events_event, Printer)
        }
        ("apps", "v1", "deployments") => {
            ("Deployment", "*apps.Deployment", apps::deployment, Printer)
        }
        ("apps", "v1", "replicasets") => {
            ("ReplicaSet", "*apps.ReplicaSet", apps::replica_set, Printer)
        }
        ("apps", "v1", "statefulsets") => (
            "StatefulSet",
            "*apps.StatefulSet",
            apps::stateful_set,
            Printer,
        ),
        ("apps", "v1", "daemonsets") => ("DaemonSet", "*apps.DaemonSet", apps::daemon_set, Printer),
        ("apps", "v1", "controllerrevisions") => (
            "ControllerRevision",
            "*apps.ControllerRevision",
            apps::controller_revision,
            Printer,
        ),
        ("batch", "v1", "jobs") => ("Job", "*batch.Job", batch::job, Printer),
        ("batch", "v1", "cronjobs") => ("CronJob", "*batch.CronJob", batch::cron_job, Printer),
        ("autoscaling", "v2", "horizontalpodautoscalers") => (
            "HorizontalPodAutoscaler",
            "*autoscaling.HorizontalPodAutoscaler",
            cluster::horizontal_pod_autoscaler,
            Printer,
        ),
        ("policy", "v1", "poddisruptionbudgets") => (
            "PodDisruptionBudget",
            "*policy.PodDisruptionBudget",
            cluster::pod_disruption_budget,
            Printer,
        ),
        ("networking.k8s.io", "v1", "ingresses") => (
            "Ingress",
            "*networking.Ingress",
            networking::ingress,
            Printer,
        ),
        ("networking.k8s.io", "v1", "ingressclasses") => (
            "IngressClass",
            "*networking.IngressClass",
            networking::ingress_class,
            Printer,
        ),
        ("networking.k8s.io", "v1", "networkpolicies") => (
            "NetworkPolicy",
            "*networking.NetworkPolicy",
            networking::network_policy,
            Printer,
        ),
        ("networking.k8s.io", "v1", "servicecidrs") => (
            "ServiceCIDR",
            "*networking.ServiceCIDR",
            networking::service_cidr,
            Printer,
        ),
        ("networking.k8s.io", "v1", "ipaddresses") => (
            "IPAddress",
            "*networking.IPAddress",
            networking::ip_address,
            Printer,
        ),
        ("discovery.k8s.io", "v1", "endpointslices") => (
            "EndpointSlice",
            "*discovery.EndpointSlice",
            networking::endpoint_slice,
            Printer,
        ),
        ("rbac.authorization.k8s.io", "v1", "roles") => {
            ("Role", "default", name_and_creation, Default)
        }
        ("rbac.authorization.k8s.io", "v1", "clusterroles") => {
            ("ClusterRole", "default", name_and_creation, Default)
        }
        ("rbac.authorization.k8s.io", "v1", "rolebindings") => (
            "RoleBinding",
            "*rbac.RoleBinding",
            cluster::role_binding,
            Printer,
        ),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings") => (
            "ClusterRoleBinding",
            "*rbac.ClusterRoleBinding",
            cluster::role_binding,
            Printer,
        ),
        ("storage.k8s.io", "v1", "storageclasses") => (
            "StorageClass",
            "*storage.StorageClass",
            storage::storage_class_row,
            Printer,
        ),
        ("storage.k8s.io", "v1", "csidrivers") => (
            "CSIDriver",
            "*storage.CSIDriver",
            storage::csi_driver,
            Printer,
        ),
        ("storage.k8s.io", "v1", "csinodes") => {
            ("CSINode", "*storage.CSINode", storage::csi_node, Printer)
        }
        ("storage.k8s.io", "v1", "csistoragecapacities") => {
            ("CSIStorageCapacity", "default", name_and_creation, Default)
        }
        ("storage.k8s.io", "v1", "volumeattachments") => (
            "VolumeAttachment",
            "*storage.VolumeAttachment",
            storage::volume_attachment,
            Printer,
        ),
        ("storage.k8s.io", "v1", "volumeattributesclasses") => (
            "VolumeAttributesClass",
            "*storage.VolumeAttributesClass",
            storage::volume_attributes_class,
            Printer,
        ),
        ("coordination.k8s.io", "v1", "leases") => {
            ("Lease", "*coordination.Lease", cluster::lease, Printer)
        }
        ("scheduling.k8s.io", "v1", "priorityclasses") => (
            "PriorityClass",
            "*scheduling.PriorityClass",
            cluster::priority_class,
            Printer,
        ),
        ("node.k8s.io", "v1", "runtimeclasses") => (
            "RuntimeClass",
            "*node.RuntimeClass",
            cluster::runtime_class,
            Printer,
        ),
        ("certificates.k8s.io", "v1", "certificatesigningrequests") => (
            "CertificateSigningRequest",
            "*certificates.CertificateSigningRequest",
            cluster::certificate_signing_request,
            Printer,
        ),
        ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations") => (
            "MutatingWebhookConfiguration",
            "*admissionregistration.MutatingWebhookConfiguration",
            cluster::webhook_configuration,
            Printer,
        ),
        ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations") => (
            "ValidatingWebhookConfiguration",
            "*admissionregistration.ValidatingWebhookConfiguration",
            cluster::webhook_configuration,
            Printer,
        ),
        ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies") => (
            "ValidatingAdmissionPolicy",
            "*admissionregistration.ValidatingAdmissionPolicy",
            cluster::validating_admission_policy,
            Printer,
        ),
        ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings") => (
            "ValidatingAdmissionPolicyBinding",
            "*admissionregistration.ValidatingAdmissionPolicyBinding",
            cluster::admission_policy_binding,
            Printer,
        ),
        ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas") => (
            "FlowSchema",
            "*flowcontrol.FlowSchema",
            cluster::flow_schema,
            PrinterSortedByPrecedence,
        ),
        ("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations") => (
            "PriorityLevelConfiguration",
            "*flowcontrol.PriorityLevelConfiguration",
            cluster::priority_level_configuration,
            Printer,
        ),
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions") => (
            "CustomResourceDefinition",
            "default",
            name_and_creation,
            Default,
        ),
        ("apiregistration.k8s.io", "v1", "apiservices") => (
            "APIService",
            "*apiregistration.APIService",
            cluster::api_service,
            AlwaysHeaders,
        ),
        ("resource.k8s.io", "v1", "deviceclasses") => (
            "DeviceClass",
            "*resource.DeviceClass",
            name_and_age,
            Printer,
        ),
        ("resource.k8s.io", "v1", "resourceclaims") => (
            "ResourceClaim",
            "*resource.ResourceClaim",
            cluster::resource_claim,
            Printer,
        ),
        ("resource.k8s.io", "v1", "resourceclaimtemplates") => (
            "ResourceClaimTemplate",
            "*resource.ResourceClaimTemplate",
            name_and_age,
            Printer,
        ),
        ("resource.k8s.io", "v1", "resourceslices") => (
            "ResourceSlice",
            "*resource.ResourceSlice",
            cluster::resource_slice,
            Printer,
        ),
        _ => return None,
    };
    let internal_annotations = match (group, resource) {
        ("apps", "deployments") => apps::deployment_annotations,
        ("apps", "daemonsets") => apps::daemon_set_annotations,
        _ => |_: &mut Annotations| Ok(()),
    };
    Some(Builtin {
        kind,
        columns: columns::get(key),
        print,
        shape,
        internal_annotations,
    })
}

/// The default convertor's row: the name and the creation time in UTC
/// RFC 3339 (Go's zero time, `0001-01-01T00:00:00Z`, when unset).
fn name_and_creation(object: Field<'_>, _: Clock) -> Result<Row, PrinterError> {
    let created = object.at(&["metadata", "creationTimestamp"]).time()?;
    let created = created.map_or_else(|| "0001-01-01T00:00:00Z".to_owned(), |t| t.rfc3339());
    Ok(Row::new(vec![name(object), created.into()]))
}

/// The row of printers that show the name and age only.
fn name_and_age(object: Field<'_>, clock: Clock) -> Result<Row, PrinterError> {
    Ok(Row::new(vec![name(object), age(object, clock)?]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ported printer gives as many cells as its type has columns
    /// (IPAddress's printer gives one more, its Age, as the API server's).
    #[test]
    fn every_printer_fills_its_columns() {
        let empty = serde_json::json!({});
        for (group, version, resource) in RESOURCES {
            let builtin = lookup(group, version, resource)
                .unwrap_or_else(|| panic!("{group}/{version} {resource}"));
            let columns: Vec<serde_json::Value> = serde_json::from_str(builtin.columns).unwrap();
            let row = (builtin.print)(Field::of(&empty), Clock::at(std::time::SystemTime::now()))
                .unwrap();
            let extra = usize::from(*resource == "ipaddresses");
            assert_eq!(
                row.cells.len(),
                columns.len() + extra,
                "{group}/{version} {resource}"
            );
        }
    }

    /// The resources ported, for tests that cover them all.
    pub(crate) const RESOURCES: &[(&str, &str, &str)] = &[
        ("", "v1", "pods"),
        ("", "v1", "podtemplates"),
        ("", "v1", "replicationcontrollers"),
        ("", "v1", "services"),
        ("", "v1", "endpoints"),
        ("", "v1", "nodes"),
        ("", "v1", "namespaces"),
        ("", "v1", "configmaps"),
        ("", "v1", "secrets"),
        ("", "v1", "serviceaccounts"),
        ("", "v1", "persistentvolumes"),
        ("", "v1", "persistentvolumeclaims"),
        ("", "v1", "resourcequotas"),
        ("", "v1", "limitranges"),
        ("", "v1", "events"),
        ("events.k8s.io", "v1", "events"),
        ("apps", "v1", "deployments"),
        ("apps", "v1", "replicasets"),
        ("apps", "v1", "statefulsets"),
        ("apps", "v1", "daemonsets"),
        ("apps", "v1", "controllerrevisions"),
        ("batch", "v1", "jobs"),
        ("batch", "v1", "cronjobs"),
        ("autoscaling", "v2", "horizontalpodautoscalers"),
        ("policy", "v1", "poddisruptionbudgets"),
        ("networking.k8s.io", "v1", "ingresses"),
        ("networking.k8s.io", "v1", "ingressclasses"),
        ("networking.k8s.io", "v1", "networkpolicies"),
        ("networking.k8s.io", "v1", "servicecidrs"),
        ("networking.k8s.io", "v1", "ipaddresses"),
        ("discovery.k8s.io", "v1", "endpointslices"),
        ("rbac.authorization.k8s.io", "v1", "roles"),
        ("rbac.authorization.k8s.io", "v1", "clusterroles"),
        ("rbac.authorization.k8s.io", "v1", "rolebindings"),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
        ("storage.k8s.io", "v1", "storageclasses"),
        ("storage.k8s.io", "v1", "csidrivers"),
        ("storage.k8s.io", "v1", "csinodes"),
        ("storage.k8s.io", "v1", "csistoragecapacities"),
        ("storage.k8s.io", "v1", "volumeattachments"),
        ("storage.k8s.io", "v1", "volumeattributesclasses"),
        ("coordination.k8s.io", "v1", "leases"),
        ("scheduling.k8s.io", "v1", "priorityclasses"),
        ("node.k8s.io", "v1", "runtimeclasses"),
        ("certificates.k8s.io", "v1", "certificatesigningrequests"),
        (
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
        ),
        ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas"),
        (
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "prioritylevelconfigurations",
        ),
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
        ("apiregistration.k8s.io", "v1", "apiservices"),
        ("resource.k8s.io", "v1", "deviceclasses"),
        ("resource.k8s.io", "v1", "resourceclaims"),
        ("resource.k8s.io", "v1", "resourceclaimtemplates"),
        ("resource.k8s.io", "v1", "resourceslices"),
    ];

    #[test]
    fn versions_and_types_not_ported_have_no_printer() {
        assert!(lookup("apps", "v1beta2", "deployments").is_none());
        assert!(lookup("autoscaling", "v1", "horizontalpodautoscalers").is_none());
        assert!(lookup("", "v1", "componentstatuses").is_none());
        assert!(lookup("example.com", "v1", "widgets").is_none());
    }
}
